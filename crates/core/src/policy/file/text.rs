//! Where in the file a value is (its line, its key) and how seconds read.

#[allow(unused_imports)]
use super::*;

pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The `section.key` at `offset`: the key of that line (or the unknown
/// field the message names), under the last `[section]` header above it.
pub(super) fn key_at(text: &str, offset: usize, message: &str) -> Option<String> {
    let before = &text[..offset.min(text.len())];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    let key = match message.split('`').nth(1) {
        Some(k) if message.starts_with("unknown field") => k.to_string(),
        _ => line.split_once('=')?.0.trim().to_string(),
    };
    let section = before[..line_start].lines().rev().find_map(|l| {
        l.trim()
            .strip_prefix('[')?
            .strip_suffix(']')
            .map(str::to_string)
    });
    Some(match section {
        Some(s) if !line.trim_start().starts_with('[') => format!("{}.{key}", s.trim()),
        _ => key,
    })
}

pub(super) fn seconds(v: f64) -> Result<Duration, String> {
    if !(v.is_finite() && v > 0.0 && v < 1e9) {
        return Err(format!("{v} must be a positive number of seconds"));
    }
    Ok(Duration::from_secs_f64(v))
}
