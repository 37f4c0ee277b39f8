//! A command sent to its slot's primary: the cluster's redirects followed,
//! its "not now"s waited out with a backoff, and retries, until the
//! command's deadline.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use redis::{Cmd, RedisResult, RetryMethod, Value};

use super::node::is_connection_error;
use super::out_of_time::{out_of_time, past_deadline};
use super::{Ask, Inner};
use crate::connection::library::is_function_missing;
use crate::connection::runtime::within;
use crate::connection::slot_map::Address;
use crate::error::is_refused_credentials;

/// The first wait before a command goes again to a node it went to
/// already (the cluster refused it for now, `TRYAGAIN` or `CLUSTERDOWN`, or
/// its nodes sent it back and forth), doubling each time up to sixteen
/// times this, until the command's deadline.
const RETRY_WAIT: Duration = Duration::from_millis(10);

/// How many times one command loads the libraries again on a node that
/// answers "function not found".
const FUNCTION_RELOADS: u32 = 3;

/// Where the next attempt of a command goes.
enum Target {
    /// The slot's primary in the map.
    Owner,
    /// `ASK`: the node the slot is migrating to, for this one command.
    Asking(Address),
}

impl Inner {
    /// Sends `cmd` to `slot`'s primary, following the cluster's redirects
    /// and waiting out its "not now"s until the command's deadline (its
    /// start plus the command timeout), which ends the command whatever
    /// the cluster answers.
    pub(super) async fn send_to_slot(
        self: &Arc<Self>,
        slot: u16,
        cmd: &Cmd,
        ask: Ask,
    ) -> RedisResult<Value> {
        let timeout = self.client.command_timeout;
        let deadline = Instant::now() + timeout;
        let mut backoff = Backoff::until(deadline);
        let mut target = Target::Owner;
        let mut reconnected = false;
        let mut reloads = 0;
        // The nodes this command went to: one it goes back to waits first.
        let mut tried: Vec<Address> = Vec::new();
        loop {
            let node = match &target {
                Target::Owner => match self.owner(slot) {
                    Ok(owner) => owner,
                    Err(error) => {
                        // No primary served the slot when the map was read
                        // (a cluster still being created, slots being
                        // covered again): read it again, in the background,
                        // at most once per refresh interval; without this
                        // the slot failed until the process restarted.
                        self.refresh_in_background();
                        return Err(error);
                    }
                },
                Target::Asking(node) => node.clone(),
            };
            let asking = matches!(target, Target::Asking(_));
            let sent = if tried.is_empty() && self.answers_at_once(&node) {
                // Its connection's own timeout is the command's.
                self.send_to(&node, cmd, asking, Some(deadline)).await
            } else {
                // A later attempt, or one that must connect first.
                self.retry_within(deadline, &node, cmd, asking).await
            };
            let error = match sent {
                Ok(reply) => return Ok(reply),
                Err(error) => error,
            };
            if is_function_missing(&error) && reloads < FUNCTION_RELOADS {
                // The node that answered, the slot's owner or the node a
                // migration sends the key to, lost its libraries (a
                // `FUNCTION FLUSH`, a restart without persistence) while
                // its connection stayed: load them on it, and send there
                // again. A flush can land between the load and the
                // command (a test flushes in a loop): a few times.
                reloads += 1;
                self.load_functions_on(&node, deadline).await?;
                continue;
            }
            if !tried.contains(&node) {
                tried.push(node.clone());
            }
            let redirect = error
                .redirect_node()
                .and_then(|(address, _)| Address::parse(address, &node));
            let method = error.retry_method();
            if matches!(method, RetryMethod::AskRedirect) && ask == Ask::Refuse {
                return Err(error);
            }
            if Instant::now() >= deadline {
                return Err(out_of_time(timeout, error));
            }
            target = match (method, redirect) {
                (RetryMethod::MovedRedirect, Some(owner)) => {
                    let bounced = tried.contains(&owner);
                    self.write_map().assign(slot, owner);
                    if bounced {
                        // Sent back to a node it left: the nodes disagree
                        // on who serves the slot (a migration's last step
                        // reaches them one at a time). Wait for them to
                        // agree, as for `TRYAGAIN`, then read the map.
                        if !backoff.wait().await || !self.refresh_within(deadline).await {
                            return Err(out_of_time(timeout, error));
                        }
                    } else {
                        self.refresh_in_background();
                    }
                    Target::Owner
                }
                (RetryMethod::AskRedirect, Some(node)) => {
                    if tried.contains(&node) && !backoff.wait().await {
                        return Err(out_of_time(timeout, error));
                    }
                    Target::Asking(node)
                }
                (RetryMethod::WaitAndRetry, _) => {
                    if !backoff.wait().await {
                        return Err(out_of_time(timeout, error));
                    }
                    Target::Owner
                }
                (RetryMethod::RefreshSlotsAndRetry, _) => {
                    if !self.refresh_within(deadline).await
                        || (self.owner(slot).ok().as_ref() == Some(&node) && !backoff.wait().await)
                    {
                        return Err(out_of_time(timeout, error));
                    }
                    Target::Owner
                }
                // A node that refuses the credentials: the caller's to fix.
                _ if is_refused_credentials(&error) => return Err(error),
                _ if error.is_timeout() => {
                    // A hung node (now marked down by `send_to`): a
                    // failover may be under way.
                    self.refresh_in_background();
                    return Err(error);
                }
                _ if is_connection_error(&error) => {
                    // A dropped connection to a live node (dropped by
                    // `send_to`): once more on a new one. A node that
                    // refuses: the map may have moved on (a failover),
                    // else the error is the caller's.
                    if !reconnected && error.is_connection_dropped() {
                        reconnected = true;
                    } else {
                        if !self.refresh_within(deadline).await {
                            return Err(error);
                        }
                        let owner = self.owner(slot).ok();
                        if owner.as_ref() == Some(&node) {
                            return Err(error);
                        }
                        let back = owner.is_some_and(|owner| tried.contains(&owner));
                        if back && !backoff.wait().await {
                            return Err(error);
                        }
                    }
                    Target::Owner
                }
                _ => return Err(error),
            };
        }
    }

    /// Loads every registered library on `node`, by the command's deadline.
    async fn load_functions_on(
        self: &Arc<Self>,
        node: &Address,
        deadline: Instant,
    ) -> RedisResult<()> {
        for function in &self.registered_functions() {
            self.send_to(node, &function.load_command(), false, Some(deadline))
                .await?;
        }
        Ok(())
    }

    /// Whether a command's first attempt on `node` needs no connection made
    /// for it: the node has one, or is known to be down (answered at once).
    fn answers_at_once(&self, node: &Address) -> bool {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        nodes
            .get(node)
            .is_some_and(|state| state.circuit.is_open() || state.current().is_some())
    }

    /// A retry of `cmd` on `node`, waited for until `deadline` (the first
    /// attempt's start plus the command timeout). A retry starts late, so
    /// its connection's own timeout would run past the deadline; it runs on
    /// a task of its own instead, and past the deadline the caller is told
    /// of a timeout while the attempt goes on to its own timeout, which
    /// marks a hung node down as a first attempt's does (cancelling it
    /// would not).
    async fn retry_within(
        self: &Arc<Self>,
        deadline: Instant,
        node: &Address,
        cmd: &Cmd,
        asking: bool,
    ) -> RedisResult<Value> {
        let (inner, node, cmd) = (Arc::clone(self), node.clone(), cmd.clone());
        let attempt = async move { inner.send_to(&node, &cmd, asking, None).await };
        within(deadline, attempt)
            .await
            .unwrap_or_else(|| Err(past_deadline(self.client.command_timeout)))
    }

    /// [`refresh`](Self::refresh) for a command's retry, waited for until
    /// `deadline` (it goes on past it in the background); whether it was done.
    async fn refresh_within(self: &Arc<Self>, deadline: Instant) -> bool {
        let inner = Arc::clone(self);
        within(deadline, async move { inner.refresh().await })
            .await
            .is_some()
    }
}

/// The waits between a command's attempts on a node it went to already:
/// [`RETRY_WAIT`], doubling up to sixteen times that, cut at the deadline.
struct Backoff {
    next: Duration,
    deadline: Instant,
}

impl Backoff {
    fn until(deadline: Instant) -> Self {
        Self {
            next: RETRY_WAIT,
            deadline,
        }
    }

    /// Waits the next wait; whether the deadline is still ahead.
    async fn wait(&mut self) -> bool {
        let left = self.deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(self.next.min(left)).await;
        self.next = (self.next * 2).min(RETRY_WAIT * 16);
        Instant::now() < self.deadline
    }
}
