//! How to reach the cluster's nodes: the seeds, a client for any node with
//! the seeds' settings, and the slot map as a seed gives it.

use std::time::Duration;

use redis::aio::ConnectionLike as _;
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, ErrorKind, RedisError,
    RedisResult,
};

use crate::connection::slot_map::{Address, SlotMap};

/// How to reach the cluster's nodes: the seeds, and the settings of every
/// node's connection (user, password, TLS, timeouts) taken from them.
pub(crate) struct ClusterClient {
    seeds: Vec<ConnectionInfo>,
    pub(super) config: AsyncConnectionConfig,
    /// How often the slot map is read again at most after a node failed.
    pub(super) refresh_interval: Duration,
    /// The budget of one command, its retries included.
    pub(super) command_timeout: Duration,
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    tls: Option<redis::TlsCertificates>,
}

impl ClusterClient {
    pub(crate) fn new(
        seeds: Vec<ConnectionInfo>,
        config: AsyncConnectionConfig,
        refresh_interval: Duration,
        command_timeout: Duration,
    ) -> Self {
        Self {
            seeds,
            config,
            refresh_interval,
            command_timeout,
            #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
            tls: None,
        }
    }

    /// Connections to every node trust `root` (PEM) instead of the platform's roots.
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    pub(crate) fn with_tls(mut self, certificates: redis::TlsCertificates) -> Self {
        self.tls = Some(certificates);
        self
    }

    /// A client for the node at `host:port`, with the seeds' settings.
    pub(super) fn node_client(&self, host: &str, port: u16) -> RedisResult<Client> {
        let template = &self.seeds[0];
        let addr = match template.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        let info = template.clone().set_addr(addr);
        #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
        if let Some(certificates) = &self.tls {
            return Client::build_with_tls(info, certificates.clone());
        }
        Client::open(info)
    }

    /// Each seed's `host:port`.
    pub(super) fn seed_addresses(&self) -> Vec<Address> {
        self.seeds
            .iter()
            .filter_map(|seed| match seed.addr() {
                ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                    Some(Address::new(host, *port))
                }
                _ => None,
            })
            .collect()
    }
}

/// The slot map as `seed` gives it, on a connection of its own (closed after).
pub(super) async fn read_slot_map(client: &ClusterClient, seed: &Address) -> RedisResult<SlotMap> {
    let mut conn = client
        .node_client(&seed.host, seed.port)?
        .get_multiplexed_async_connection_with_config(&client.config)
        .await?;
    let reply = conn
        .req_packed_command(redis::cmd("CLUSTER").arg("SLOTS"))
        .await?
        .extract_error()?;
    SlotMap::parse(&reply, seed).ok_or_else(|| {
        RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "unexpected CLUSTER SLOTS reply",
            format!("{reply:?}"),
        ))
    })
}
