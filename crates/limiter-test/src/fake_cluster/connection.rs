//! One client connection to a fake node: each command answered by the
//! node itself, from its script or its topology, or forwarded to the real
//! server on a connection of its own, and recorded.

use std::sync::Arc;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::frame::{command, error, read_command, read_reply};
use super::node::{Answer, NodeState, Seen};
use super::slot::slot_of_command;

/// Serves `client` (the node's connection `id`) until it closes, or the
/// real server does.
pub(super) async fn serve_connection(node: Arc<NodeState>, client: TcpStream, id: u64) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", node.server_port)).await else {
        return;
    };
    let (client_read, mut client_write) = client.into_split();
    let (server_read, mut server_write) = server.into_split();
    let (mut client_read, mut server_read) =
        (BufReader::new(client_read), BufReader::new(server_read));
    let mut after_asking = false;
    while let Ok(Some(args)) = read_command(&mut client_read).await {
        let slot = slot_of_command(&args);
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        let subcommand = args
            .get(1)
            .map(|arg| String::from_utf8_lossy(arg).to_ascii_uppercase());
        let refusal = slot.and_then(|slot| node.refusal(slot, after_asking));
        let (reply, answer) = match (name.as_str(), subcommand.as_deref(), refusal) {
            ("ASKING", _, _) => (b"+OK\r\n".to_vec(), Answer::Own),
            ("CLUSTER", Some("SLOTS"), _) => (node.topology.cluster_slots(), Answer::Own),
            (_, _, Some(refusal)) => (error(&refusal), Answer::Refused(refusal)),
            _ => {
                let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                if server_write.write_all(&command(&args)).await.is_err() {
                    return;
                }
                match read_reply(&mut server_read).await {
                    Ok(reply) => (reply, Answer::Served),
                    Err(_) => return,
                }
            }
        };
        node.record(Seen {
            connection: id,
            args: args
                .iter()
                .map(|arg| String::from_utf8_lossy(arg).into_owned())
                .collect(),
            slot,
            after_asking,
            answer,
        });
        // Redis keeps a client's `ASKING` for its next command alone.
        after_asking = name == "ASKING";
        if client_write.write_all(&reply).await.is_err() {
            return;
        }
    }
}
