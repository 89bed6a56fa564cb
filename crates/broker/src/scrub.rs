//! Replacing byte strings in a stream that arrives in pieces: each
//! secret's value by its placeholder in what comes back from a bound
//! host, so a server that echoes a request hands the program the
//! placeholder, never the value.

/// A streaming replacer of byte strings. Its `Debug` shows neither the
/// strings nor what it holds back: they are secret values.
pub struct Scrubber {
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Bytes not yet sent on: the end of what came, which could be the
    /// start of a value.
    pending: Vec<u8>,
    longest: usize,
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
    /// Replaces each `from` by its `to` (none empty); where one `from`
    /// begins another, the longer is replaced.
    pub fn new(mut pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Scrubber {
        pairs.sort_by_key(|(f, _)| std::cmp::Reverse(f.len()));
        let longest = pairs.iter().map(|(f, _)| f.len()).max().unwrap_or(0);
        assert!(
            pairs.iter().all(|(f, _)| !f.is_empty()),
            "an empty string to replace"
        );
        Scrubber {
            pairs,
            pending: Vec::new(),
            longest,
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
        let hold = if all {
            0
        } else {
            self.longest.saturating_sub(1)
        };
        let mut out = Vec::with_capacity(self.pending.len());
        let mut i = 0;
        while i < self.pending.len() {
            let rest = &self.pending[i..];
            if let Some((from, to)) = self.pairs.iter().find(|(f, _)| rest.starts_with(f)) {
                out.extend_from_slice(to);
                i += from.len();
                continue;
            }
            // What is left could still be the start of a value.
            if rest.len() <= hold {
                break;
            }
            out.push(rest[0]);
            i += 1;
        }
        self.pending.drain(..i);
        out
    }
}
