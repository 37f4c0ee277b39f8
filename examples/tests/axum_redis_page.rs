//! docs/axum-redis.md's walk-through, run: the page's `limits.toml`, served
//! by two instances of the example server (an axum service on
//! `Registry::redis`, as the page's) on one real redis-server, answers the
//! page's five 200s and then the 429 it shows, headers and body, whichever
//! instance is asked.
//!
//! The binary is this package's example, which `cargo test` builds beside
//! this test (`target/<profile>/examples/http_server`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;

use limiter_test::redis_server::RedisServer;
use limiter_test::ExampleServer;

/// An instance of the example server, killed when dropped.
struct Server(ExampleServer);

impl Server {
    /// `http_server` with `args`, on a free loopback port.
    fn start(args: &[&str]) -> Self {
        let mut command = Command::new(limiter_test::example_binary(
            "limiter-examples",
            "http_server",
        ));
        command.args(["--listen", "127.0.0.1:0"]).args(args);
        Self(ExampleServer::start(command))
    }

    /// `GET /` on a connection of its own: the whole response, as text.
    fn get(&self) -> String {
        let mut stream = TcpStream::connect(self.0.addr).unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }
}

/// The body of the first block fenced as `language` after `heading`.
fn block_after(page: &str, heading: &str, language: &str) -> String {
    let from = page
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"));
    let fence = format!("```{language}\n");
    let start = from + page[from..].find(&fence).unwrap() + fence.len();
    let end = start + page[start..].find("```").unwrap();
    page[start..end].to_owned()
}

/// A response's lines as the page shows them: without `date` and
/// `content-length` (which follow the clock) nor `connection` (this
/// test's request closes its connection, curl's does not), the seconds
/// until a retry
/// written `S`, each checked to be within the policy's 10 s window.
fn comparable(response: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for line in response.lines() {
        if ["date:", "content-length:", "connection:"]
            .iter()
            .any(|name| line.starts_with(name))
        {
            continue;
        }
        let mut line = line.to_owned();
        for marker in [
            "retry-after: ",
            "x-ratelimit-reset: ",
            ";t=",
            "retry after ",
        ] {
            if let Some(at) = line.find(marker) {
                let digits = at + marker.len();
                let end = digits
                    + line[digits..]
                        .find(|c: char| !c.is_ascii_digit())
                        .unwrap_or(line.len() - digits);
                let seconds: u64 = line[digits..end].parse().unwrap();
                assert!((1..=10).contains(&seconds), "{line}");
                line.replace_range(digits..end, "S");
            }
        }
        lines.push(line);
    }
    lines
}

#[test]
fn the_axum_redis_page_s_limits_answer_its_first_429_from_redis_on_two_instances() {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/axum-redis.md"),
    )
    .unwrap();
    let limits = block_after(&page, "## limits.toml", "toml");
    let shown = block_after(&page, "## The first 429", "text");

    let redis = RedisServer::start();
    let file = std::env::temp_dir().join(format!("axum-redis-page-{}.toml", std::process::id()));
    std::fs::write(&file, limits).unwrap();
    let args = [
        "--config",
        file.to_str().unwrap(),
        "--name",
        "default",
        "--redis-url",
        &redis.url(),
    ];
    let instances = [Server::start(&args), Server::start(&args)];

    // Six requests back to back, the instances taking turns: the count is
    // Redis's, so the sixth is refused. They must all fall within the
    // policy's 10 s window: six loopback requests take milliseconds, a
    // thousand times less, even on a loaded 2-core machine.
    let responses: Vec<String> = (0..6).map(|i| instances[i % 2].get()).collect();
    std::fs::remove_file(&file).unwrap();
    let statuses: Vec<&str> = responses
        .iter()
        .map(|r| r.lines().next().unwrap())
        .collect();
    let mut expected = vec!["HTTP/1.1 200 OK"; 5];
    expected.push("HTTP/1.1 429 Too Many Requests");
    assert_eq!(statuses, expected);
    assert_eq!(
        comparable(&responses[5]),
        comparable(&shown),
        "docs/axum-redis.md shows another 429"
    );
}
