//! [`ExampleServer`]: an example server run as a process by a test, on the
//! free loopback port it prints, killed when the test is done with it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

/// A server started from `command`, which prints `listening on
/// http://ADDR/` as its first line; killed when dropped.
#[derive(Debug)]
pub struct ExampleServer {
    /// The process (its stdout past the first line is the test's to read).
    pub child: Child,
    /// The address it listens on.
    pub addr: SocketAddr,
}

impl ExampleServer {
    /// Starts `command` (its stdout piped, to read the address; its stderr
    /// as the command sets it) and waits for the address it prints.
    ///
    /// # Panics
    ///
    /// If it does not start, or prints something else first.
    pub fn start(mut command: Command) -> Self {
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the example server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout piped"))
            .read_line(&mut line)
            .expect("its first line");
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .and_then(|rest| rest.strip_suffix('/'))
            .unwrap_or_else(|| panic!("the example server printed {line:?}"))
            .parse()
            .expect("an address");
        Self { child, addr }
    }
}

impl Drop for ExampleServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
