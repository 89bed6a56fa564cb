//! A body on its way through the broker: chunk-size lines read strictly,
//! and the watch for placeholders in what the program sends.

use crate::broker::contains;
use crate::wire::Stop;
use crate::Secret;

/// A chunk-size line: hex digits (at most 15), and, when
/// `extensions` (an answer's, which are dropped), `;…` after them.
pub(crate) fn chunk_size(line: &[u8], extensions: bool) -> Option<u64> {
    let digits = match line.iter().position(|&b| b == b';') {
        Some(i) if extensions => &line[..i],
        Some(_) => return None,
        None => line,
    };
    let digits = std::str::from_utf8(digits).ok()?;
    let digits = if extensions {
        digits.trim_end()
    } else {
        digits
    };
    if digits.is_empty() || digits.len() > 15 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// Watches a request body for any secret's placeholder, across pieces.
pub(crate) struct Watch<'a> {
    placeholders: Vec<&'a [u8]>,
    tail: Vec<u8>,
    keep: usize,
}

impl<'a> Watch<'a> {
    pub(crate) fn new(secrets: &'a [Secret]) -> Watch<'a> {
        let placeholders: Vec<&[u8]> = secrets.iter().map(|s| s.placeholder().as_bytes()).collect();
        let keep = placeholders.iter().map(|p| p.len()).max().unwrap_or(1) - 1;
        Watch {
            placeholders,
            tail: Vec::new(),
            keep,
        }
    }

    /// `Err` when a placeholder ends in `piece` (so the piece that would
    /// complete it is never sent).
    pub(crate) fn check(&mut self, piece: &[u8]) -> Result<(), Stop> {
        self.tail.extend_from_slice(piece);
        if let Some(p) = self.placeholders.iter().find(|p| contains(&self.tail, p)) {
            let name = String::from_utf8_lossy(p);
            return Err(Stop::Refused(
                format!(
                    "a placeholder ({name}) is in the request body: a secret goes in headers \
                     only"
                ),
                None,
            ));
        }
        let cut = self.tail.len().saturating_sub(self.keep);
        self.tail.drain(..cut);
        Ok(())
    }
}
