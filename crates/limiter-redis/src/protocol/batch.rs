//! Batches: the decisions of one limiter that arrive while earlier ones are
//! in flight go to Redis together, as one call that decides them in order.
//!
//! Why: Redis spends about as much per command on reading, dispatching and
//! answering it (and on starting the function and reading `TIME`) as on a
//! decision's own work. A call that decides k requests pays that once
//! (docs/benchmarks.md, "Batches").
//!
//! Nothing waits to fill a batch by time: a decision goes with its lane's
//! next call, which a task of its own sends at once unless
//! [`MAX_IN_FLIGHT`] calls of the lane are already in flight, and then as
//! soon as one of them is answered. The task lets the runtime run once
//! before it takes the lane's queue, so callers woken together (by one
//! call's answers) queue their next requests first and share one call:
//! Redis spends most of a few concurrent callers' CPU on each call's
//! round trip, not on its decisions (docs/benchmarks.md, "Batches"). The
//! call is atomic and decides its requests in arrival order, so the
//! decisions are those of the same requests sent one at a time.
//!
//! A request waits in its lane's queue for the command timeout at most: a
//! server slower than the requests arrive (its calls answered, but fewer
//! decisions a second than are asked for) would otherwise grow the queue,
//! and every caller's wait, without bound. A request that has waited that
//! long is answered with a timeout error and never sent (nothing counted),
//! as is one whose caller has gone; neither trips the circuit (the server
//! answers).
//!
//! On a cluster requests queue per primary (a lane), and a call decides
//! requests of several slots of its node: the cluster checks only that a
//! call's declared keys share a slot, so the other requests' keys go as
//! arguments to a library registered with `allow-cross-slot-keys`, which
//! reads every key before it writes any. When one is not the node's to
//! serve now (a slot moved or moving), the call writes nothing and says
//! so, and each of its requests is decided alone, following the
//! cluster's redirects. A sliding log kept in a sorted set cannot be read
//! up front: its requests queue per slot, so only decisions on one key
//! (a global limit, say) share calls.
//!
//! A key that holds another type than its state's fails its own requests
//! alone: a string state is read with `MGET` (which reads another type as
//! none) and written over with `SET`; a sorted set's first read is
//! protected, and its request answered as not decided, writing nothing.

use std::borrow::Borrow;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use limiter_core::backend::all_of;
use limiter_core::{Decision, Policies};
use tokio::sync::oneshot;

use crate::connection::backend::RedisBackend;
use crate::connection::cluster::Ask;
use crate::connection::runtime::Runtime;
use crate::error::{BackendError, BackendErrorKind};
use crate::protocol::keys::KeyLayout;
use crate::protocol::scripts::LuaFunction;
use crate::protocol::wire::{self, Keys, Mode, Request};

/// Calls of one limiter in flight at once, each a batch: enough to keep
/// the server busy while the client reads an answer, few enough that
/// concurrent decisions share calls. Two rather than four: a call's fixed
/// cost to the server (its three commands, reading, reply) is several
/// decisions' worth, and the larger batches of two decide more per second
/// (hot key and 10,000 keys, one server and a cluster; docs/benchmarks.md,
/// "Batches").
const MAX_IN_FLIGHT: usize = 2;

/// Requests per call at most, so that one call holds Redis (which runs one
/// function at a time) for a fraction of a millisecond.
const MAX_BATCH: usize = 64;

/// What one limiter needs to decide on Redis, and its waiting requests.
pub(crate) struct Decider {
    pub(crate) policies: Policies,
    pub(crate) backend: RedisBackend,
    /// One per part, in the set's order.
    pub(crate) keys: Box<[KeyLayout]>,
    /// The function of every part, with their constants written in.
    pub(crate) function: LuaFunction,
    /// How requests are grouped into lanes.
    grouping: Grouping,
    /// The waiting requests and calls in flight of each lane; a lane is
    /// dropped when idle.
    lanes: Mutex<Lanes>,
}

/// A decider is found in the limiter's history by its policies.
impl Borrow<Policies> for Decider {
    fn borrow(&self) -> &Policies {
        &self.policies
    }
}

/// How a limiter's requests are grouped into lanes, whose requests may
/// share a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grouping {
    /// One server: one lane.
    One,
    /// A cluster, every part's state a string: a lane per primary.
    Node,
    /// A cluster, some part's state a sorted set: a lane per slot.
    Slot,
}

/// Lanes by slot or node index. Either is already spread (a slot is CRC16
/// of the key): it is only spread over the word, where SipHash would cost
/// a decision more than the lookup it serves.
type Lanes = HashMap<u16, Queue, BuildHasherDefault<SlotHasher>>;

#[derive(Default)]
struct SlotHasher(u64);

impl Hasher for SlotHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8) | u64::from(byte);
        }
    }

    fn write_u16(&mut self, slot: u16) {
        self.0 = u64::from(slot);
    }

    fn finish(&self) -> u64 {
        // Fibonacci hashing: the slot's bits reach the top ones, which the
        // map's probe reads first.
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Queued>,
    in_flight: usize,
}

struct Waiting {
    request: Request,
    answer: oneshot::Sender<Result<Decision, BackendError>>,
}

/// A request in a lane's queue, until its deadline: queued at, plus the
/// command timeout.
struct Queued {
    waiting: Waiting,
    deadline: Instant,
}

type Batch = Vec<Waiting>;

impl Decider {
    pub(crate) fn new(
        policies: Policies,
        backend: RedisBackend,
        keys: Box<[KeyLayout]>,
        function: LuaFunction,
    ) -> Self {
        let grouping = match (backend.is_cluster(), function.decides_across_slots()) {
            (false, _) => Grouping::One,
            (true, true) => Grouping::Node,
            (true, false) => Grouping::Slot,
        };
        Self {
            grouping,
            policies,
            backend,
            keys,
            function,
            lanes: Mutex::default(),
        }
    }

    /// `request`'s lane: on a cluster its primary, or its slot (every
    /// part's key shares it); else the one lane. A primary not known yet
    /// (the backend connects on first use) has a lane of its own.
    fn lane(&self, request: &Request) -> u16 {
        match self.grouping {
            Grouping::One => 0,
            Grouping::Slot => self.slot(request),
            Grouping::Node => self.backend.node_of(self.slot(request)).unwrap_or(u16::MAX),
        }
    }

    /// `request`'s slot on a cluster.
    fn slot(&self, request: &Request) -> u16 {
        self.keys[0].slot(&request.key)
    }

    /// Decides `request` in its lane's next call: one that a new task
    /// sends, or, while [`MAX_IN_FLIGHT`] calls of the lane are in flight,
    /// the one sent when the first of them is answered.
    ///
    /// Every call is sent by a task of its own, which holds the lane's
    /// turn ([`Turn::serve`]); the caller only waits for its answer. So a
    /// caller that stops polling its decision, or drops it (its own
    /// timeout), holds up and fails no one else's: the turn is passed on
    /// when Redis answers. The request is queued once first polled: a
    /// decision whose caller gives up after its call took it is still
    /// decided, once, and counts, unheard (which can only deny others,
    /// never over-admit); one whose caller is gone before is never sent.
    pub(crate) async fn decide(
        self: &Arc<Self>,
        request: Request,
    ) -> Result<Decision, BackendError> {
        let lane = self.lane(&request);
        let (answer, answered) = oneshot::channel();
        let waiting = Waiting { request, answer };
        let deadline = Instant::now() + self.backend.command_timeout();
        let starts_turn = {
            let mut lanes = self.lock();
            let queue = lanes.entry(lane).or_default();
            queue.waiting.push_back(Queued { waiting, deadline });
            let free = queue.in_flight < MAX_IN_FLIGHT;
            queue.in_flight += usize::from(free);
            free
        };
        if starts_turn {
            let turn = Turn {
                decider: Arc::clone(self),
                lane,
                held: true,
            };
            drop(self.backend.runtime().spawn(turn.serve())?);
        }
        answered.await.unwrap_or_else(|_| {
            // Outside any runtime the call ran on the first one, gone now.
            Err(match self.backend.runtime().is_here() {
                true => BackendError::dropped(),
                false => Runtime::gone(),
            })
        })
    }

    /// The next batch of `lane`, keeping the call's turn; or `None`,
    /// giving it up (and dropping the lane once idle).
    fn next(&self, lane: u16) -> Option<Batch> {
        let mut lanes = self.lock();
        let queue = lanes.get_mut(&lane)?;
        let batch = Self::take(queue, Instant::now(), self.backend.command_timeout());
        if batch.is_empty() {
            queue.in_flight -= 1;
            if queue.in_flight == 0 {
                lanes.remove(&lane);
            }
            None
        } else {
            Some(batch)
        }
    }

    /// The oldest waiting requests of one mode (acquire or peek), as many
    /// as one call takes: peeks alone are decided by the library's
    /// no-writes function, which a full Redis still runs
    /// ([`LuaFunction`]). On the way, requests whose caller has gone are
    /// dropped, and those queued `timeout` ago or more (by `now`) answered
    /// with a timeout error; neither is sent.
    fn take(queue: &mut Queue, now: Instant, timeout: Duration) -> Batch {
        let mut batch: Batch = Vec::new();
        while let Some(front) = queue.waiting.front() {
            let gone = front.waiting.answer.is_closed();
            let expired = front.deadline <= now;
            if !gone && !expired {
                let full = batch.len() == MAX_BATCH;
                let mode = batch.first().map(|w| w.request.mode);
                if full || mode.is_some_and(|mode| mode != front.waiting.request.mode) {
                    break;
                }
            }
            let Some(Queued { waiting, .. }) = queue.waiting.pop_front() else {
                break;
            };
            match (gone, expired) {
                (true, _) => {}
                (false, true) => {
                    let _ = waiting.answer.send(Err(queued_too_long(timeout)));
                }
                (false, false) => batch.push(waiting),
            }
        }
        batch
    }

    /// One call deciding `request` alone.
    async fn call_alone(&self, request: &Request) -> Result<Decision, BackendError> {
        let mut answers = self.call_declared(std::slice::from_ref(request)).await?;
        answers
            .pop()
            .unwrap_or_else(|| Err(self.unexpected(&"no answer")))
    }

    /// One call deciding `batch`, each request answered.
    async fn answer(&self, lane: u16, batch: Batch) {
        let (requests, answers): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|w| (w.request, w.answer)).unzip();
        match self.call(&requests).await {
            Ok(decisions) => {
                for (answer, decision) in answers.into_iter().zip(decisions) {
                    let _ = answer.send(decision);
                }
            }
            Err(error) => {
                if let Some(request) = requests.first() {
                    self.fail_waiting(lane, request, &error);
                }
                for answer in answers {
                    let _ = answer.send(Err(error.clone()));
                }
            }
        }
    }

    /// After a call of `lane` (with `request`) met an outage (no answer in
    /// time, no connection, the server or node known down or serving no
    /// decisions): its waiting requests are answered at once and never
    /// sent. Sent, they would go to the server or node that just failed,
    /// and a request queued behind a call that hung would wait out a
    /// second command timeout (its queue's, then its own call's) before
    /// hearing what the first call already told. They are answered as the
    /// open circuit answers when the outage opened one (so a decision
    /// asked once the outage is known never hears of a round trip), else
    /// with the call's failure (a cluster answering `CLUSTERDOWN`).
    fn fail_waiting(&self, lane: u16, request: &Request, error: &BackendError) {
        if !error.is_outage() {
            return;
        }
        let waiting = match self.lock().get_mut(&lane) {
            Some(queue) => std::mem::take(&mut queue.waiting),
            None => return,
        };
        if waiting.is_empty() {
            return;
        }
        let known_down = self.backend.known_down(self.slot(request));
        answer_unsent(waiting, &not_sent(error, known_down));
    }

    /// One call deciding `requests` in order: each one's decision, or the
    /// call's failure. On a cluster, requests of several slots go as one
    /// call across them ([`Keys::AcrossSlots`]) and, when some key is not
    /// its node's to serve now, each alone, following the redirects.
    ///
    /// The call follows a `MOVED` (the new owner checks every key as the
    /// old one did) but not an `ASK`: after `ASKING` the node a slot is
    /// migrating to would take a missing key of *any* slot it imports as
    /// its own, while that key may still live on its old node.
    async fn call(
        &self,
        requests: &[Request],
    ) -> Result<Vec<Result<Decision, BackendError>>, BackendError> {
        if !self.spans_slots(requests) {
            return self.call_declared(requests).await;
        }
        let cmd = self
            .function
            .decide(&self.keys, requests.iter(), Keys::AcrossSlots);
        match self
            .backend
            .query_here(&cmd, Some(self.function.library()), Ask::Refuse)
            .await
        {
            Ok(reply) if !wire::is_elsewhere(&reply) => self.answers(&reply, requests),
            Err(error) if !error.is_ask() && !error.is_unknown_command() => Err(error),
            // Some key is not the node's to serve now, or a server without
            // the module's command answered (then each call alone finds
            // the library).
            _ => {
                let alone = requests.iter().map(|request| self.call_alone(request));
                Ok(futures_util::future::join_all(alone).await)
            }
        }
    }

    /// Whether `requests` lie in several slots of a cluster whose lanes
    /// are its primaries.
    fn spans_slots(&self, requests: &[Request]) -> bool {
        self.grouping == Grouping::Node
            && requests.split_first().is_some_and(|(first, rest)| {
                let slot = self.slot(first);
                rest.iter().any(|r| self.slot(r) != slot)
            })
    }

    /// One call deciding `requests` (of one slot, on a cluster) in order.
    async fn call_declared(
        &self,
        requests: &[Request],
    ) -> Result<Vec<Result<Decision, BackendError>>, BackendError> {
        let query = || {
            let cmd = self
                .function
                .decide(&self.keys, requests.iter(), Keys::Declared);
            // On the call task's runtime.
            async move {
                self.backend
                    .query_here(&cmd, Some(self.function.library()), Ask::Follow)
                    .await
            }
        };
        let reply = match query().await {
            // A server without the module (a restart without it): the
            // library decides this call, and the next ones.
            Err(error) if error.is_unknown_command() && self.function.leave_module() => {
                query().await?
            }
            reply => reply?,
        };
        self.answers(&reply, requests)
    }

    /// Each request's decision from a call's `reply`.
    fn answers(
        &self,
        reply: &redis::Value,
        requests: &[Request],
    ) -> Result<Vec<Result<Decision, BackendError>>, BackendError> {
        let (server_us, records) = wire::split_reply(self.policies.parts(), reply, requests.len())
            .ok_or_else(|| self.unexpected(reply))?;
        Ok(records
            .zip(requests)
            .map(|(record, request)| {
                // A charge's record is a peek of 1 on the state it leaves.
                let cost = match request.mode {
                    Mode::Charge => 1,
                    _ => request.cost,
                };
                (record, request, cost)
            })
            .map(
                |(record, request, cost)| match (request.time_us, server_us) {
                    (Some(time_us), _) => self.read(record, time_us, cost),
                    (None, 0) => Err(self.unexpected(&"a reply without the Redis TIME it used")),
                    (None, time_us) => self.read(record, time_us, cost),
                },
            )
            .collect())
    }

    fn unexpected(&self, reply: &dyn std::fmt::Debug) -> BackendError {
        BackendError::new(
            BackendErrorKind::Redis,
            format!("unexpected function reply {reply:?}"),
        )
    }

    /// One request's decision from its part of the reply: each part
    /// converted, then combined (docs/spec.md section 7).
    fn read(&self, record: &[u8], time_us: u64, cost: u64) -> Result<Decision, BackendError> {
        let parts = self.policies.parts();
        if wire::holds_another_type(parts, record) {
            return Err(BackendError::new(
                BackendErrorKind::Redis,
                "WRONGTYPE: a key of this request holds another type than its sorted set; \
                 not decided, nothing written",
            ));
        }
        if parts.len() == 1 {
            let mut one = None;
            wire::read_reply(parts, record, time_us, |part| one = Some(part.decision))
                .and(one)
                .ok_or_else(|| self.unexpected(&record))
        } else {
            self.read_set(record, time_us, cost)
        }
    }

    /// A set's decision from its parts' (docs/spec.md section 7).
    fn read_set(&self, record: &[u8], time_us: u64, cost: u64) -> Result<Decision, BackendError> {
        let parts = self.policies.parts();
        let mut decisions: [Decision; Policies::MAX_PARTS] =
            std::array::from_fn(|_| Decision::admit(0, 0, 0));
        let mut reset_now = [std::time::Duration::ZERO; Policies::MAX_PARTS];
        let mut read = 0;
        wire::read_reply(parts, record, time_us, |part| {
            decisions[read] = part.decision;
            reset_now[read] = part.reset_now;
            read += 1;
        })
        .ok_or_else(|| self.unexpected(&record))?;
        Ok(all_of(&decisions[..read], cost, |i| reset_now[i]))
    }

    fn lock(&self) -> MutexGuard<'_, Lanes> {
        // The lanes are consistent between statements: a panic elsewhere
        // leaves nothing half done.
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Answers every request of `waiting` with `error`, none sent.
fn answer_unsent(waiting: VecDeque<Queued>, error: &BackendError) {
    for queued in waiting {
        let _ = queued.waiting.answer.send(Err(error.clone()));
    }
}

/// The answer to the requests waiting behind a call that failed with
/// `error`, an outage: the open circuit's answer (`known_down`), if the
/// outage opened one, else the call's failure.
fn not_sent(error: &BackendError, known_down: Option<BackendError>) -> BackendError {
    match known_down {
        Some(down) => {
            let message = format!("not sent, nothing counted: {down}");
            down.with_message(message)
        }
        None => error.clone().with_message(format!(
            "not sent, nothing counted: the call before it in its lane failed ({error})"
        )),
    }
}

/// The answer to a request that waited in its lane's queue for the whole
/// command timeout: Redis answers, but fewer decisions a second than are
/// asked of it. Not sent, so nothing was counted.
fn queued_too_long(timeout: Duration) -> BackendError {
    BackendError::overloaded(
        format!(
            "the decision waited {timeout:?} (the command timeout) for a call to Redis, \
             behind calls of its limiter that Redis answers slower than decisions arrive"
        ),
        timeout,
    )
}

/// A call's turn in a lane, held by the task that sends the call, then
/// every batch that waits in the lane, until none does.
struct Turn {
    decider: Arc<Decider>,
    lane: u16,
    /// Until given up (when none waits).
    held: bool,
}

impl Turn {
    /// Decides the lane's waiting batches in turn, until none waits.
    /// Before each it yields once, so that callers just answered (or
    /// woken together) queue their next requests and go in the same call.
    async fn serve(mut self) {
        while let Some(batch) = self.next() {
            self.decider.answer(self.lane, batch).await;
            tokio::task::yield_now().await;
        }
    }

    /// The lane's next batch, keeping the turn; or `None`, giving it up.
    fn next(&mut self) -> Option<Batch> {
        let batch = self.decider.next(self.lane);
        self.held = batch.is_some();
        batch
    }
}

impl Drop for Turn {
    /// A task dropped while it holds its turn (its runtime is shutting
    /// down) gives the turn up, so that the lane is not left taken; with
    /// the lane's last turn go its waiting requests, their callers told.
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        let mut lanes = self.decider.lock();
        if let Some(queue) = lanes.get_mut(&self.lane) {
            queue.in_flight -= 1;
            if queue.in_flight == 0 {
                lanes.remove(&self.lane);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::wire::Mode;

    const TIMEOUT: Duration = Duration::from_secs(1);

    type Answered = oneshot::Receiver<Result<Decision, BackendError>>;

    /// A request of `mode` queued at `queued_at`, and its caller's end.
    fn queued(mode: Mode, queued_at: Instant) -> (Queued, Answered) {
        let request = Request {
            key: b"k"[..].into(),
            cost: 1,
            mode,
            time_us: None,
        };
        let (answer, answered) = oneshot::channel();
        let waiting = Waiting { request, answer };
        let deadline = queued_at + TIMEOUT;
        (Queued { waiting, deadline }, answered)
    }

    /// A queue of requests of `modes`, all queued at `queued_at`.
    fn queue_of(
        modes: impl IntoIterator<Item = Mode>,
        queued_at: Instant,
    ) -> (Queue, Vec<Answered>) {
        let (waiting, callers) = modes.into_iter().map(|m| queued(m, queued_at)).unzip();
        (
            Queue {
                waiting,
                in_flight: 0,
            },
            callers,
        )
    }

    /// A batch is the oldest run of one mode, at most [`MAX_BATCH`]: a
    /// peek is never sent with an acquire to the function that may write.
    #[test]
    fn a_batch_holds_requests_of_one_mode() {
        use Mode::{Acquire, Peek};
        let now = Instant::now();
        let (mut queue, _callers) = queue_of([Peek, Peek, Acquire, Acquire, Peek], now);
        let mut batches = Vec::new();
        while !queue.waiting.is_empty() {
            let batch = Decider::take(&mut queue, now, TIMEOUT);
            batches.push(batch.iter().map(|w| w.request.mode).collect::<Vec<_>>());
        }
        assert_eq!(
            batches,
            [vec![Peek, Peek], vec![Acquire, Acquire], vec![Peek]]
        );

        let (mut queue, _callers) = queue_of((0..MAX_BATCH + 1).map(|_| Acquire), now);
        assert_eq!(Decider::take(&mut queue, now, TIMEOUT).len(), MAX_BATCH);
        assert_eq!(queue.waiting.len(), 1);
    }

    /// The requests behind a call that met an outage are answered unsent:
    /// as the open circuit answers when the outage opened it, else with
    /// the call's failure.
    #[test]
    fn requests_behind_a_failed_call_are_answered_unsent() {
        use Mode::Acquire;
        let timeout = BackendError::new(BackendErrorKind::Timeout, "no answer within 300ms");
        let open = BackendError::new(BackendErrorKind::Unavailable, "Redis unavailable for 1ms");
        for (known_down, kind) in [
            (Some(open), BackendErrorKind::Unavailable),
            (None, BackendErrorKind::Timeout),
        ] {
            let start = Instant::now();
            let (first, mut first_caller) = queued(Acquire, start);
            let (second, mut second_caller) = queued(Acquire, start);
            let answer = not_sent(&timeout, known_down);
            answer_unsent(VecDeque::from([first, second]), &answer);
            for caller in [&mut first_caller, &mut second_caller] {
                let error = caller.try_recv().unwrap().unwrap_err();
                assert_eq!(error.kind(), kind);
                assert!(
                    error.to_string().starts_with("not sent, nothing counted"),
                    "{error}"
                );
            }
        }
    }

    #[test]
    fn requests_queued_too_long_or_abandoned_are_not_sent() {
        use Mode::Acquire;
        let start = Instant::now();
        let (old, mut old_caller) = queued(Acquire, start);
        let (abandoned, abandoned_caller) = queued(Acquire, start + TIMEOUT / 2);
        let (fresh, _fresh_caller) = queued(Acquire, start + TIMEOUT / 2);
        drop(abandoned_caller);
        let mut queue = Queue {
            waiting: VecDeque::from([old, abandoned, fresh]),
            in_flight: 1,
        };
        let batch = Decider::take(&mut queue, start + TIMEOUT, TIMEOUT);
        assert_eq!(batch.len(), 1, "only the fresh request is sent");
        assert!(queue.waiting.is_empty());
        let error = old_caller.try_recv().unwrap().unwrap_err();
        assert_eq!(error.kind(), BackendErrorKind::Timeout);
        let error = limiter_core::Error::from(error);
        assert!(error.is_overloaded(), "{error:?}");
        assert!(error.chain().to_string().contains("not sent"), "{error:?}");
        // Everything expired or gone: an empty batch, which gives the turn up.
        let (expired, _caller) = queued(Acquire, start);
        queue.waiting.push_back(expired);
        assert!(Decider::take(&mut queue, start + 2 * TIMEOUT, TIMEOUT).is_empty());
    }
}
