//! Replacing secret values in a stream that arrives in pieces: in what
//! comes back from a bound host, so a server that echoes a request hands
//! the program the placeholder, never the value.
//!
//! Whole values only. Replacing parts of a value (a run of its bytes)
//! would make the scrubber an oracle: a program that sends guesses of the
//! value's next byte to an echoing server would learn, from which guess
//! comes back replaced, the value byte by byte. A whole value cannot be
//! guessed (16 bytes at least, [`MIN_VALUE_LEN`](crate::MIN_VALUE_LEN)). A
//! server that echoes only part of a value hands that part back: the
//! README lists it with the other server-side transformations not caught.
//!
//! Linear in the bytes that pass (Aho-Corasick, leftmost-longest): a
//! hostile server's bytes cannot make the scan quadratic.

use aho_corasick::{AhoCorasick, MatchKind};

/// A streaming scrubber. Its `Debug` shows neither the values nor what
/// it holds back. Cloning is cheap (the automaton is shared): one is built
/// per run and cloned for each answer.
#[derive(Clone)]
pub struct Scrubber {
    finder: AhoCorasick,
    /// What replaces each value, by pattern index.
    to: Vec<Vec<u8>>,
    longest: usize,
    /// Bytes not yet sent on: the end of what came, which could be the
    /// start of a value.
    pending: Vec<u8>,
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrubber")
            .field("strings", &self.to.len())
            .field("held_back", &self.pending.len())
            .finish()
    }
}

impl Scrubber {
    /// Replaces each `from` (none empty) by its `to`; where values
    /// overlap, the longest starting first wins.
    pub fn new(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Scrubber {
        assert!(
            pairs.iter().all(|(f, _)| !f.is_empty()),
            "an empty string to replace"
        );
        let longest = pairs.iter().map(|(f, _)| f.len()).max().unwrap_or(0);
        let finder = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(pairs.iter().map(|(f, _)| f))
            .expect("a handful of values up to 4 KiB each build");
        Scrubber {
            finder,
            to: pairs.into_iter().map(|(_, t)| t).collect(),
            longest,
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
        let n = self.pending.len();
        // Before the end of the stream, nothing is decided from where a
        // value (the longest) could still start and not yet be whole.
        let settled = if all {
            n
        } else {
            n.saturating_sub(self.longest.saturating_sub(1))
        };
        let mut out = Vec::with_capacity(n);
        let mut at = 0;
        for m in self.finder.find_iter(&self.pending) {
            // A match that starts where a longer value could still begin
            // and run past what came waits for more.
            if !all && m.start() + self.longest > n {
                break;
            }
            out.extend_from_slice(&self.pending[at..m.start()]);
            out.extend_from_slice(&self.to[m.pattern().as_usize()]);
            at = m.end();
        }
        // Bytes before `settled` that no match took are sent as they are.
        let keep_from = settled.max(at);
        if keep_from > at {
            out.extend_from_slice(&self.pending[at..keep_from]);
        }
        self.pending.drain(..keep_from);
        out
    }
}
