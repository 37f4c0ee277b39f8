//! [`RedisBackendBuilder`]: the connection options of a [`RedisBackend`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use limiter_core::Error;
use redis::{AsyncConnectionConfig, Client, ConnectionInfo, IntoConnectionInfo};

use crate::connection::backend::{BackendOptions, Connector, RedisBackend};
use crate::connection::cluster::ClusterClient;
use crate::error::BackendError;

/// Builds a [`RedisBackend`]; made by [`RedisBackend::builder`] or
/// [`RedisBackend::from_client`].
///
/// Every option has a default, documented on its method.
#[must_use = "a builder does nothing until `.build().await`"]
pub struct RedisBackendBuilder {
    source: Source,
    username: Option<String>,
    password: Option<String>,
    db: Option<i64>,
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    tls_root_certificate: Option<Vec<u8>>,
    pub(crate) connections: usize,
    pub(crate) connection_timeout: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) probe_interval: Duration,
}

/// Where the connection settings come from.
enum Source {
    Url(String),
    Client(Box<Client>),
    /// Seed nodes of a cluster.
    Cluster(Vec<String>),
}

impl RedisBackendBuilder {
    /// What the backend keeps of these options.
    fn options(&self) -> BackendOptions {
        BackendOptions {
            connections: self.connections,
            connection_timeout: self.connection_timeout,
            command_timeout: self.command_timeout,
            probe_interval: self.probe_interval,
        }
    }

    /// The default [`connections`](Self::connections).
    pub const DEFAULT_CONNECTIONS: usize = 1;
    /// The default [`connection_timeout`](Self::connection_timeout).
    pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
    /// The default [`command_timeout`](Self::command_timeout).
    pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(1);
    /// The default [`probe_interval`](Self::probe_interval).
    pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_millis(500);

    fn new(source: Source) -> Self {
        Self {
            source,
            username: None,
            password: None,
            db: None,
            #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
            tls_root_certificate: None,
            connections: Self::DEFAULT_CONNECTIONS,
            connection_timeout: Self::DEFAULT_CONNECTION_TIMEOUT,
            command_timeout: Self::DEFAULT_COMMAND_TIMEOUT,
            probe_interval: Self::DEFAULT_PROBE_INTERVAL,
        }
    }

    pub(crate) fn from_url(url: String) -> Self {
        Self::new(Source::Url(url))
    }

    pub(crate) fn from_client(client: Client) -> Self {
        Self::new(Source::Client(Box::new(client)))
    }

    pub(crate) fn cluster(seeds: Vec<String>) -> Self {
        Self::new(Source::Cluster(seeds))
    }

    /// The ACL user name, overriding the URL's. Defaults to the URL's (or
    /// none: the `default` user).
    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    /// The password, overriding the URL's. Defaults to the URL's (or none).
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// The logical database, overriding the URL's. Defaults to the URL's
    /// (or 0).
    pub fn db(mut self, db: i64) -> Self {
        self.db = Some(db);
        self
    }

    /// Trusts `pem` (one or more PEM certificates) as the root of a
    /// `rediss://` server's certificate chain, instead of the system's
    /// trust store (for a private CA). Defaults to the system's store.
    ///
    /// Available with the `tls-rustls` or the `tls-native-tls` feature.
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_certificate = Some(pem.into());
        self
    }

    /// How many multiplexed connections carry the decisions, in round
    /// robin. Each pipelines any number of concurrent decisions, so one is
    /// usually enough (see `docs/benchmarks.md`). Must be at least 1.
    /// Defaults to 1.
    pub fn connections(mut self, connections: usize) -> Self {
        self.connections = connections;
        self
    }

    /// How long connecting may take (TCP, TLS, `AUTH`, then `PING` and the
    /// function libraries' `FUNCTION LOAD`, which also wait for the
    /// [`command_timeout`](Self::command_timeout)). Must not be zero.
    /// Defaults to 1 second.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How long Redis may take to answer one command. Past it the decision
    /// fails, and Redis is taken as down: decisions fail at once until a
    /// probe succeeds. A call's reconnection or retries also end, for its
    /// caller, this long after the call began (a timeout; they go on in
    /// the background, and mark Redis down if they time out themselves).
    /// Must not be zero. Defaults to 1 second.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// While Redis is down, how often one background probe tries to
    /// connect (each try bounded by the timeouts; callers never wait for
    /// it). Must not be zero. Defaults to 500 ms.
    pub fn probe_interval(mut self, interval: Duration) -> Self {
        self.probe_interval = interval;
        self
    }

    /// Checks every option, then opens every connection.
    ///
    /// A bad option or URL is [`Error::InvalidConfig`] (a [`BackendError`]
    /// of kind [`Config`](crate::BackendErrorKind::Config)), before any
    /// round trip; so is a Redis Cluster node where one server is expected
    /// ([`RedisBackend::builder`]: its `INFO cluster` says
    /// `cluster_enabled:1`; build it with [`RedisBackend::cluster`]), and
    /// so are credentials the server refuses (a wrong password or user, or
    /// none where one is required). An unreachable server is
    /// [`Error::Backend`], within the timeouts. Must be called within a Tokio runtime, the one the
    /// backend is then used on (its connections run on it).
    pub async fn build(self) -> Result<RedisBackend, Error> {
        let backend = self.build_lazy()?;
        backend.connect().await?;
        Ok(backend)
    }

    /// Checks every option as [`build`](Self::build) does, but connects
    /// only when the first command needs it: for a service that must start
    /// while Redis is down (with a failure policy that answers without
    /// it), or for code that cannot `await` here. A Redis Cluster node
    /// where one server is expected is then that first call's
    /// [`Error::InvalidConfig`], and every later call's; so are credentials
    /// the server refuses, until a probe finds it takes them.
    pub fn build_lazy(self) -> Result<RedisBackend, Error> {
        if self.connections == 0 {
            return Err(config("connections must be at least 1, got 0"));
        }
        if self.connection_timeout.is_zero()
            || self.command_timeout.is_zero()
            || self.probe_interval.is_zero()
        {
            return Err(config(
                "timeouts and the probe interval must be longer than zero",
            ));
        }
        let (info, url) = match &self.source {
            Source::Url(url) => {
                let info = parse_url(url, "Redis URL")?;
                (info, redact_url(url))
            }
            Source::Client(client) => {
                let info = client.get_connection_info().clone();
                let url = format!("{:?}", info.addr());
                (info, url)
            }
            Source::Cluster(seeds) => {
                let (connector, url) = self.cluster_client(seeds)?;
                return Ok(RedisBackend::new(connector, url, self.options()));
            }
        };
        let client = self.client(info, &url)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connection_timeout))
            .set_response_timeout(Some(self.command_timeout));
        let connector = Connector::Server { client, config };
        Ok(RedisBackend::new(connector, url, self.options()))
    }

    /// The cluster client, seeded by `seeds`, with this builder's options,
    /// and the seeds for messages.
    fn cluster_client(&self, seeds: &[String]) -> Result<(Connector, String), Error> {
        if seeds.is_empty() {
            return Err(config("a cluster needs at least one seed node URL"));
        }
        if self.db.is_some_and(|db| db != 0) {
            return Err(config("a Redis Cluster has only database 0"));
        }
        let shown = seeds
            .iter()
            .map(|url| redact_url(url))
            .collect::<Vec<_>>()
            .join(",");
        let mut infos = Vec::with_capacity(seeds.len());
        for url in seeds {
            let info = parse_url(url, "Redis Cluster seed")?;
            if matches!(info.addr(), redis::ConnectionAddr::Unix(_)) {
                return Err(config(
                    "a Redis Cluster seed needs a host and port, not a socket",
                ));
            }
            infos.push(self.with_credentials(info));
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connection_timeout))
            .set_response_timeout(Some(self.command_timeout));
        #[allow(unused_mut)] // without TLS
        let mut client =
            ClusterClient::new(infos, config, self.probe_interval, self.command_timeout);
        #[cfg(feature = "tls-rustls")]
        {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
        if let Some(root) = &self.tls_root_certificate {
            client = client.with_tls(root_certificates(root)?);
        }
        Ok((
            Connector::Cluster(Arc::new(client)),
            format!("cluster {shown}"),
        ))
    }

    /// The client of one server at `info`, with this builder's overrides
    /// (`url` names it in messages).
    /// `info` with this builder's user, password and database.
    fn with_credentials(&self, info: ConnectionInfo) -> ConnectionInfo {
        let mut redis = info.redis_settings().clone().set_skip_set_lib_name();
        if let Some(username) = &self.username {
            redis = redis.set_username(username);
        }
        if let Some(password) = &self.password {
            redis = redis.set_password(password);
        }
        if let Some(db) = self.db {
            redis = redis.set_db(db);
        }
        info.set_redis_settings(redis)
    }

    fn client(&self, info: ConnectionInfo, url: &str) -> Result<Client, Error> {
        let info = self.with_credentials(info);
        #[cfg(feature = "tls-rustls")]
        {
            // rustls needs a process-wide crypto provider; an application
            // that installed its own keeps it.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
        if let Some(root) = &self.tls_root_certificate {
            let client = Client::build_with_tls(info, root_certificates(root)?).map_err(|e| {
                BackendError::config(format!("invalid TLS settings for {url}"))
                    .with_source(e)
                    .into_config_error()
            })?;
            return Ok(client);
        }
        Client::open(info).map_err(|e| {
            BackendError::config(format!("invalid Redis settings for {url}"))
                .with_source(e)
                .into_config_error()
        })
    }
}

/// `pem` as the only trusted roots of a TLS connection.
#[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
fn root_certificates(pem: &[u8]) -> Result<redis::TlsCertificates, Error> {
    if !String::from_utf8_lossy(pem).contains("-----BEGIN CERTIFICATE-----") {
        return Err(config(
            "tls_root_certificate holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pem.to_vec()),
    })
}

fn config(message: &str) -> Error {
    BackendError::config(message).into_config_error()
}

impl fmt::Debug for RedisBackendBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Url(url) => redact_url(url),
            Source::Client(client) => format!("{:?}", client.get_connection_info().addr()),
            Source::Cluster(seeds) => format!(
                "cluster {}",
                seeds
                    .iter()
                    .map(|url| redact_url(url))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        };
        f.debug_struct("RedisBackendBuilder")
            .field("server", &source)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .field("connections", &self.connections)
            .field("connection_timeout", &self.connection_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("probe_interval", &self.probe_interval)
            .finish_non_exhaustive()
    }
}

/// `url` read as a connection's address; an error names it as `what`
/// (without its password) and, when it has no scheme, says which to write.
fn parse_url(url: &str, what: &str) -> Result<ConnectionInfo, Error> {
    url.into_connection_info().map_err(|e| {
        let shown = redact_url(url);
        let hint = match url.contains("://") {
            true => String::new(),
            false => format!(
                " (no scheme: write redis://{shown}, or rediss:// for TLS, \
                 redis+unix:// for a socket)"
            ),
        };
        BackendError::config(format!("invalid {what} {shown:?}{hint}"))
            .with_source(e)
            .into_config_error()
    })
}

/// The URL without its password, for messages and logs:
/// `redis://user:***@host/`, and `redis+unix:///run/redis.sock?pass=***`
/// (a unix socket's password is a query parameter).
///
/// ```
/// assert_eq!(
///     limiter_redis::url::redact_url("redis://app:s3cret@cache:6379/0"),
///     "redis://app:***@cache:6379/0"
/// );
/// ```
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    // The credentials end at the authority's last `@` (a password may hold
    // a `?`); the query starts after the authority.
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let at = rest[..authority_end].rfind('@').map_or(0, |at| at + 1);
    let (address, query) = match rest[at..].find('?') {
        Some(mark) => (&rest[..at + mark], Some(&rest[at + mark + 1..])),
        None => (rest, None),
    };
    let authority_end = address
        .find('/')
        .unwrap_or(address.len())
        .min(authority_end);
    let mut redacted = match address[..authority_end].rfind('@') {
        Some(at) => {
            let user = address[..at].split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***{}", &address[at..])
        }
        None => format!("{scheme}://{address}"),
    };
    if let Some(query) = query {
        redacted.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if PASSWORD_PARAMETERS.contains(&name) => format!("{name}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        redacted.push_str(&pairs.join("&"));
    }
    redacted
}

/// The query parameters that carry a password: `pass` is the one redis-rs
/// reads for a unix socket; `password` is redacted too, as a likely slip.
const PASSWORD_PARAMETERS: [&str; 2] = ["pass", "password"];

impl RedisBackend {
    /// Starts building a backend for the server at `url`
    /// (`redis://[user:password@]host[:port][/db]`, or `rediss://` for TLS
    /// with the `tls-rustls` or `tls-native-tls` feature). A Redis Cluster
    /// node there is refused as a configuration error: see
    /// [`cluster`](Self::cluster).
    pub fn builder(url: impl Into<String>) -> RedisBackendBuilder {
        RedisBackendBuilder::from_url(url.into())
    }

    /// Starts building a backend on an existing [`redis::Client`] (for
    /// connection settings this builder does not offer).
    pub fn from_client(client: Client) -> RedisBackendBuilder {
        RedisBackendBuilder::from_client(client)
    }

    /// Starts building a backend on a Redis Cluster, found from one or more
    /// seed nodes (`redis://host:port/` each; all share one user and
    /// password). Every key of a decision sits in one slot (the user key
    /// is a hash tag), so decisions are as atomic as on one server. This
    /// crate routes the commands (one connection per primary, redirects
    /// followed; see docs/backends.md, "Redis Cluster"), and loads the
    /// function libraries on each node connection as it is made.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), limiter_core::Error> {
    /// let redis = limiter_redis::RedisBackend::cluster([
    ///     "redis://10.0.0.1:7000/",
    ///     "redis://10.0.0.2:7000/",
    /// ])
    /// .build()
    /// .await?;
    /// # let _ = redis;
    /// # Ok(()) }
    /// ```
    pub fn cluster<I, S>(seeds: I) -> RedisBackendBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisBackendBuilder::cluster(seeds.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/"),
            "redis://127.0.0.1:6379/"
        );
        assert_eq!(
            redact_url("redis://app:s3cret@cache:6379/0"),
            "redis://app:***@cache:6379/0"
        );
        assert_eq!(
            redact_url("rediss://:s3cret@cache/"),
            "rediss://:***@cache/"
        );
        assert_eq!(redact_url("not a url"), "not a url");
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?db=1&pass=s3cret"),
            "redis+unix:///run/redis.sock?db=1&pass=***"
        );
        assert_eq!(
            redact_url("unix:///tmp/r.sock?password=s3cret&user=app"),
            "unix:///tmp/r.sock?password=***&user=app"
        );
        assert_eq!(
            redact_url("redis://user:pa?ss@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(
            redact_url("redis://app:s3cret@cache/?protocol=resp3"),
            "redis://app:***@cache/?protocol=resp3"
        );
    }
}
