//! A one-line progress indicator on stderr, shown only when stderr is a
//! terminal (so redirected output and test captures never see it).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How often the line is redrawn at most.
const REDRAW_EVERY: Duration = Duration::from_millis(200);
/// Nothing is drawn for runs shorter than this.
const SHOW_AFTER: Duration = Duration::from_millis(500);
/// The clock is read once per this many requests.
const CHECK_EVERY: u64 = 4096;

/// Counts requests and redraws `"{label}: N requests"` on stderr with `\r`.
#[derive(Debug)]
pub(crate) struct Progress {
    label: String,
    enabled: bool,
    count: u64,
    started: Instant,
    last_draw: Option<Instant>,
}

impl Progress {
    /// A progress line labelled `label`; inert unless stderr is a terminal.
    pub(crate) fn new(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            enabled: std::io::stderr().is_terminal(),
            count: 0,
            started: Instant::now(),
            last_draw: None,
        }
    }

    /// Counts one request, redrawing now and then.
    pub(crate) fn tick(&mut self) {
        self.count += 1;
        if !self.enabled || !self.count.is_multiple_of(CHECK_EVERY) {
            return;
        }
        let now = Instant::now();
        let due = match self.last_draw {
            None => now.duration_since(self.started) >= SHOW_AFTER,
            Some(last) => now.duration_since(last) >= REDRAW_EVERY,
        };
        if due {
            self.last_draw = Some(now);
            let rate = self.count as f64 / now.duration_since(self.started).as_secs_f64();
            let mut stderr = std::io::stderr().lock();
            let _ = write!(
                stderr,
                "\r{}: {} requests ({:.0}/s)\x1b[K",
                self.label, self.count, rate
            );
            let _ = stderr.flush();
        }
    }

    /// Erases the line if it was drawn.
    pub(crate) fn finish(&mut self) {
        if self.last_draw.take().is_some() {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[K");
            let _ = stderr.flush();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
