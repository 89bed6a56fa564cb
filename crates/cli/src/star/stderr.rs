//! cordon's own stderr during `cordon star`: its messages, its log lines
//! and the JSON lines of an installed package's notifications all go
//! through one bounded queue that one thread writes to fd 2 (so lines
//! never interleave), and nothing else ever writes fd 2. A stderr nobody
//! reads (a full pipe) then blocks that thread only: a call is never held,
//! and cordon gives up on what is left half a second after the writes
//! stop making progress, then exits. A closed stderr is not an error
//! (never a panic).

use std::io::Write;
use std::sync::OnceLock;
use std::time::Duration;

use cordon_starlark::{LineQueue, QueueLimits};

/// How long the last writes to stderr may make no progress before cordon
/// stops waiting for them.
const STALL: Duration = Duration::from_millis(500);

/// fd 2, written directly: no lock shared with anything (std's `Stderr`
/// would be held by a write blocked on a full pipe).
struct Fd2;

impl Write for Fd2 {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        loop {
            // SAFETY: writes from a valid buffer of `buf.len()` bytes to fd 2.
            let n = unsafe { libc::write(2, buf.as_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The queue in front of fd 2 (made on first use).
pub fn queue() -> Option<&'static LineQueue> {
    static QUEUE: OnceLock<Option<LineQueue>> = OnceLock::new();
    QUEUE
        .get_or_init(|| LineQueue::new("cordon-stderr", QueueLimits::default(), Fd2).ok())
        .as_ref()
}

/// One message line on stderr (a newline is added), never blocking.
pub fn say(message: impl AsRef<str>) {
    let mut line = message.as_ref().as_bytes().to_vec();
    if !line.ends_with(b"\n") {
        line.push(b'\n');
    }
    match queue() {
        Some(q) => {
            let _ = q.push(line);
        }
        None => {
            let _ = Fd2.write_all(&line);
        }
    }
}

/// Waits for what is queued while the writes make progress, and at most
/// [`STALL`] without progress (stderr is a pipe nobody reads).
pub fn flush() {
    wait_for(queue(), STALL);
}

/// [`flush`] for any queue, with its own stall bound.
pub fn wait_for(queue: Option<&LineQueue>, stall: Duration) {
    let Some(q) = queue else { return };
    let mut seen = q.stats().delivered;
    loop {
        let stats = q.flush(stall);
        if stats.pending == 0 || stats.delivered == seen {
            return;
        }
        seen = stats.delivered;
    }
}

/// The writer `cordon star`'s log lines go to: the same queue.
#[derive(Clone, Copy)]
pub struct TracingWriter;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for TracingWriter {
    type Writer = Box<dyn Write + 'a>;
    fn make_writer(&'a self) -> Self::Writer {
        match queue() {
            Some(q) => Box::new(q.clone()),
            None => Box::new(Fd2),
        }
    }
}
