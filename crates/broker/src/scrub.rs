//! Replacing secret values in a stream that arrives in pieces: in what
//! comes back from a bound host, so a server that echoes a request hands
//! the program the placeholder, never the value.
//!
//! Not only whole copies: any run of [`SCRUB_RUN`] or more bytes that
//! also occur in a value is replaced (a server that echoes the first 20
//! bytes of a header, or cuts a value in two, must not hand back its
//! parts). What a server transforms first (escapes, encodes, changes the
//! case of) is not recognised: the docs list it as a residual.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The shortest run of a value's bytes that is replaced.
pub const SCRUB_RUN: usize = 8;

/// The most the scrubber holds back while a run goes on (a server that
/// repeats a value's bytes without end): past it, the run is replaced
/// and sent.
const MAX_HELD: usize = 64 * 1024;

/// A streaming scrubber. Its `Debug` shows neither the values nor what
/// it holds back.
pub struct Scrubber {
    /// Each value and what replaces it.
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Every window of `run` bytes of every value (as a number), to the
    /// pair it is of.
    windows: HashMap<u64, usize, BuildHasherDefault<Mix>>,
    run: usize,
    /// Bytes not yet sent on.
    pending: Vec<u8>,
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrubber")
            .field("strings", &self.pairs.len())
            .field("held_back", &self.pending.len())
            .finish()
    }
}

impl Scrubber {
    /// Replaces each `from` (none empty), and any run of [`SCRUB_RUN`]
    /// bytes or more of it (of its whole length, for a shorter one), by
    /// its `to`.
    pub fn new(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Scrubber {
        assert!(
            pairs.iter().all(|(f, _)| !f.is_empty()),
            "an empty string to replace"
        );
        let run = pairs
            .iter()
            .map(|(f, _)| f.len())
            .min()
            .unwrap_or(SCRUB_RUN)
            .min(SCRUB_RUN);
        let mut windows: HashMap<u64, usize, BuildHasherDefault<Mix>> = HashMap::default();
        // Longer values first: a window shared with a shorter one names
        // the longer.
        let mut order: Vec<usize> = (0..pairs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(pairs[i].0.len()));
        for i in order {
            for w in pairs[i].0.windows(run) {
                windows.entry(key(w)).or_insert(i);
            }
        }
        Scrubber {
            pairs,
            windows,
            run,
            pending: Vec::new(),
        }
    }

    /// Takes the next piece; returns what may be sent on now (the end of
    /// it may be held back until the next piece or [`finish`](Self::finish)).
    pub fn push(&mut self, piece: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(piece);
        self.drain(false)
    }

    /// The rest, at the end of the stream.
    pub fn finish(&mut self) -> Vec<u8> {
        self.drain(true)
    }

    fn drain(&mut self, all: bool) -> Vec<u8> {
        let p = &self.pending;
        let n = p.len();
        // covered[i]: byte i lies in a window of a value's bytes; of[i]:
        // whose.
        let mut of: Vec<Option<usize>> = vec![None; n];
        if n >= self.run {
            for start in 0..=n - self.run {
                if let Some(&who) = self.windows.get(&key(&p[start..start + self.run])) {
                    for slot in &mut of[start..start + self.run] {
                        slot.get_or_insert(who);
                    }
                }
            }
        }
        let mut out = Vec::with_capacity(n);
        let mut i = 0;
        // Without the end of the stream, the last `run - 1` bytes could
        // still begin a window, and a run that reaches the end could go on.
        let judged = if all {
            n
        } else {
            n.saturating_sub(self.run - 1)
        };
        while i < n {
            match of[i] {
                None if i < judged => {
                    out.push(p[i]);
                    i += 1;
                }
                None => break,
                Some(who) => {
                    let end = (i..n).find(|&j| of[j].is_none()).unwrap_or(n);
                    if end == n && !all && n - i < MAX_HELD {
                        break;
                    }
                    out.extend_from_slice(&self.pairs[who].1);
                    i = end;
                }
            }
        }
        self.pending.drain(..i);
        out
    }
}

/// A window of at most 8 bytes as one number (windows are all of one
/// length, so the zero padding of a shorter one is unambiguous).
fn key(w: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..w.len()].copy_from_slice(w);
    u64::from_le_bytes(b)
}

/// A multiplicative hash for the windows: a lookup per byte of every
/// answer must cost little. The windows are of values the host holds,
/// the keys looked up the server's bytes; a collision costs a comparison,
/// never a wrong replacement (the map compares the whole key).
#[derive(Default)]
struct Mix(u64);

impl Hasher for Mix {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0 ^ x)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }
}
