//! How to reach the cluster's nodes: the seeds, and a client for any node
//! with the seeds' settings.

use std::time::Duration;

use redis::{AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, RedisResult};

use crate::connection::slot_map::Address;

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
