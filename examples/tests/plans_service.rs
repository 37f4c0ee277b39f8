//! The plans example service (`examples/plans_service.rs`) served as its
//! users run it, its configuration file edited while it serves and
//! reloaded on `SIGHUP`: each client's used units carried to its new
//! limits (exact counts), no request decided under a mix of the old and
//! the new limits, and a broken file refused with the limits in force
//! kept; on memory and on a real redis-server.
//!
//! The binary is this package's example, which `cargo test` builds beside
//! this test (`target/<profile>/examples/plans_service`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use limiter_test::redis_server::RedisServer;
use limiter_test::ExampleServer;
/// The example's own limits: free's API limit is `fixed-window:10/1m`.
fn plans_toml() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("plans.toml");
    std::fs::read_to_string(path).unwrap()
}

/// The example's limits with free's API limit `limit` a minute.
fn with_free_api_limit(limit: u64) -> String {
    let text = plans_toml();
    let free = "limits = [\"fixed-window:10/1m\"]";
    assert!(
        text.contains(free),
        "examples/plans.toml changed its free API limit"
    );
    text.replacen(free, &format!("limits = [\"fixed-window:{limit}/1m\"]"), 1)
}

/// The service, serving a configuration file of its own, killed and the
/// file removed when dropped.
struct Service {
    server: ExampleServer,
    addr: SocketAddr,
    config: PathBuf,
    /// Its log lines (stderr), as they come.
    log: Receiver<String>,
}

impl Service {
    fn start(name: &str, text: &str, redis: Option<&RedisServer>) -> Self {
        let config =
            std::env::temp_dir().join(format!("plans-service-{name}-{}.toml", std::process::id()));
        std::fs::write(&config, text).unwrap();
        let mut command = Command::new(limiter_test::example_binary(
            "limiter-examples",
            "plans_service",
        ));
        command
            .args(["--serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .stderr(Stdio::piped());
        if let Some(redis) = redis {
            command.args(["--redis-url", &redis.url()]);
        }
        let mut server = ExampleServer::start(command);
        let (lines, log) = mpsc::channel();
        let stderr = BufReader::new(server.child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            addr: server.addr,
            server,
            config,
            log,
        }
    }

    /// Writes `text` as its configuration and sends it `SIGHUP`; returns
    /// the log line of the reload's outcome.
    fn reload(&self, text: &str) -> String {
        std::fs::write(&self.config, text).unwrap();
        let status = Command::new("kill")
            .args(["-HUP", &self.server.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        // A reload takes milliseconds; a minute covers a loaded machine
        // many times over, and bounds only how long a hung one is waited.
        loop {
            let line = (self.log.recv_timeout(Duration::from_secs(60)))
                .expect("the service logs each reload");
            if line.contains("rate limits reloaded") || line.contains("reload was refused") {
                return line;
            }
        }
    }

    /// `GET /api` as API key `key` (and, if any, authenticated on `plan`'s
    /// key): its status and its headers.
    fn api(&self, key: &str) -> Reply {
        let mut stream = TcpStream::connect(self.addr).unwrap();
        let request = format!(
            "GET /api HTTP/1.1\r\nhost: {}\r\nx-api-key: {key}\r\nconnection: close\r\n\r\n",
            self.addr
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        Reply(response)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

/// A whole HTTP response, as text.
struct Reply(String);

impl Reply {
    fn status(&self) -> u16 {
        self.0[9..12].parse().unwrap()
    }

    fn header(&self, name: &str) -> &str {
        let prefix = format!("{name}: ");
        let line = self.0.lines().find(|line| line.starts_with(&prefix));
        line.unwrap_or_else(|| panic!("no {name}: {}", self.0))[prefix.len()..].trim()
    }
}

/// 9 of free's 10 used; the file edited to 50 a minute: the client is
/// admitted 41 more, not 50; an API key the service puts on pro then has
/// pro's own 100 (a key of its own); edited down to 5, the client is
/// refused.
fn used_units_carry_across_reloads(service: &Service) {
    for _ in 0..9 {
        assert_eq!(service.api("bob-key").status(), 200);
    }
    let reloaded = service.reload(&with_free_api_limit(50));
    assert!(reloaded.contains("policies_changed=1"), "{reloaded}");
    let admitted = (0..45)
        .filter(|_| service.api("bob-key").status() == 200)
        .count();
    assert_eq!(admitted, 41);
    assert_eq!(service.api("alice-key").header("x-ratelimit-limit"), "100");
    service.reload(&with_free_api_limit(5));
    let refused = service.api("bob-key");
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.header("x-ratelimit-limit"), "5");
}

/// Reloads back and forth between 300 and 400 a minute while four
/// clients send requests: every response's limit is the one its
/// `RateLimit-Policy` names, and once the last reload is logged, every
/// request is decided under its limits.
fn no_request_is_decided_under_a_mix(service: &Service) {
    let addr = service.addr;
    let clients: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                for _ in 0..100 {
                    let mut stream = TcpStream::connect(addr).unwrap();
                    let request = format!(
                        "GET /api HTTP/1.1\r\nhost: {addr}\r\nx-api-key: mix-key\r\n\
                         connection: close\r\n\r\n"
                    );
                    stream.write_all(request.as_bytes()).unwrap();
                    let mut text = String::new();
                    stream.read_to_string(&mut text).unwrap();
                    let reply = Reply(text);
                    let limit = reply.header("x-ratelimit-limit").to_owned();
                    assert_eq!(
                        reply.header("ratelimit-policy"),
                        format!("\"free/fixed-window:{limit}/1m\";q={limit};w=60")
                    );
                }
            })
        })
        .collect();
    for round in 0..10 {
        let line = service.reload(&with_free_api_limit([300, 400][round % 2]));
        assert!(line.contains("rate limits reloaded"), "{line}");
    }
    for client in clients {
        client.join().unwrap();
    }
    assert_eq!(service.api("mix-key").header("x-ratelimit-limit"), "400");
}

/// A file that does not parse is refused, logged with why, and the limits
/// in force stay.
fn a_broken_file_keeps_the_limits_in_force(service: &Service) {
    let line = service.reload("[policies.api\nlimits = [");
    assert!(line.contains("reload was refused"), "{line}");
    assert!(line.contains("line 1"), "{line}");
    assert_eq!(service.api("other-key").header("x-ratelimit-limit"), "400");
}

#[test]
fn the_plans_service_reloads_its_file_while_it_serves_on_memory() {
    let service = Service::start("memory", &plans_toml(), None);
    used_units_carry_across_reloads(&service);
    no_request_is_decided_under_a_mix(&service);
    a_broken_file_keeps_the_limits_in_force(&service);
}

#[test]
fn the_plans_service_reloads_its_file_while_it_serves_on_redis() {
    let redis = RedisServer::start();
    let service = Service::start("redis", &plans_toml(), Some(&redis));
    used_units_carry_across_reloads(&service);
    no_request_is_decided_under_a_mix(&service);
    a_broken_file_keeps_the_limits_in_force(&service);
}
