//! `${HOME}`, `${CWD}` and `${CORDON_SCRATCH}` in policy files, and
//! nothing else: no shell, no other variables.

use std::path::{Path, PathBuf};

use super::file::{EnvValue, Expansions};

pub(super) fn valid_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Expands `${HOME}`, `${CWD}` and `${CORDON_SCRATCH}` (`scratch` is what
/// the last stands for, or `None` where it is not allowed).
fn expand(s: &str, vars: &Expansions, scratch: Option<&str>) -> Result<String, String> {
    if s.starts_with('~') {
        return Err(format!("`{s}`: `~` is not expanded; write ${{HOME}}"));
    }
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        let (name, len) = ["HOME", "CWD", "CORDON_SCRATCH"]
            .into_iter()
            .find_map(|n| {
                tail.strip_prefix(&format!("${{{n}}}"))
                    .map(|_| (n, n.len() + 3))
            })
            .ok_or_else(|| {
                format!(
                    "`{s}`: only ${{HOME}}, ${{CWD}} and ${{CORDON_SCRATCH}} are expanded (no \
                     shell, no other variables)"
                )
            })?;
        let value = match name {
            "HOME" => vars
                .home
                .as_ref()
                .and_then(|h| h.to_str())
                .ok_or_else(|| format!("`{s}` uses ${{HOME}}, but HOME is unset or not UTF-8"))?
                .to_string(),
            "CWD" => vars
                .cwd
                .to_str()
                .ok_or_else(|| format!("`{s}` uses ${{CWD}}, which is not UTF-8"))?
                .to_string(),
            _ => scratch
                .ok_or_else(|| {
                    format!(
                        "`{s}`: ${{CORDON_SCRATCH}} may start an `[env] set` value only (the \
                         scratch dir is granted already)"
                    )
                })?
                .to_string(),
        };
        out.push_str(&value);
        rest = &tail[len..];
    }
    out.push_str(rest);
    Ok(out)
}

pub(super) fn expand_path(s: &str, vars: &Expansions) -> Result<PathBuf, String> {
    let p = PathBuf::from(expand(s, vars, None)?);
    if !p.is_absolute() {
        return Err(format!(
            "`{s}` is not an absolute path (start it with /, ${{HOME}} or ${{CWD}})"
        ));
    }
    if p.components().any(|c| {
        matches!(
            c,
            std::path::Component::ParentDir | std::path::Component::CurDir
        )
    }) {
        return Err(format!("`{s}` holds `.` or `..`: write the path plainly"));
    }
    Ok(p.components().collect())
}

pub(super) fn expand_env_value(s: &str, vars: &Expansions) -> Result<EnvValue, String> {
    const MARK: &str = "\u{0}scratch\u{0}";
    if let Some(rel) = s.strip_prefix("${CORDON_SCRATCH}") {
        let rel = expand(rel, vars, None)?;
        let rel = rel.trim_start_matches('/');
        if Path::new(rel)
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(format!(
                "`{s}`: the path after ${{CORDON_SCRATCH}} must stay inside it"
            ));
        }
        return Ok(EnvValue::InScratch(PathBuf::from(rel)));
    }
    let text = expand(s, vars, Some(MARK))?;
    if text.contains(MARK) {
        return Err(format!("`{s}`: ${{CORDON_SCRATCH}} may only start a value"));
    }
    Ok(EnvValue::Text(text))
}
