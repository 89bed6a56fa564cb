//! A policy file's `[secrets.NAME]`: where a credential comes from, the
//! hosts it may go to, how, and where the program finds its placeholder.

use std::path::PathBuf;

/// Where a secret's value comes from (`from`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretSource {
    /// `env:VAR`: a variable of cordon's own environment (never passed to
    /// the program).
    Env(String),
    /// `file:PATH`: a file's contents, one trailing newline dropped (a
    /// path outside everything the sandbox may read).
    File(PathBuf),
    /// `store:PACKAGE/NAME`: a secret of the sealed store `cordon star
    /// secret set` writes.
    Store {
        /// The package namespace.
        package: String,
        /// The secret's name in it.
        name: String,
    },
}

/// A `[secrets.NAME]` table: where the value comes from, which hosts it
/// may go to, how, and where the program finds its placeholder.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SecretBinding {
    /// `from`.
    pub from: SecretSource,
    /// `hosts`: exact names, HTTPS (the egress grammar).
    #[serde(serialize_with = "ser_patterns")]
    pub hosts: Vec<cordon_egress::HostPattern>,
    /// `header`: `"Name: template with {}"`, set on every request to the
    /// hosts; without it the placeholder is swapped where it appears in
    /// a request's headers.
    pub header: Option<String>,
    /// `env`: the variable holding the placeholder (the secret's name
    /// unless given).
    pub env: String,
}

impl SecretSource {
    /// Parses `env:VAR`, `file:PATH` or `store:PACKAGE/NAME` (the path
    /// not yet expanded).
    pub fn parse(s: &str) -> Result<SecretSource, String> {
        let bad = || {
            format!(
                "`{s}` is not a secret source: use env:VAR, file:PATH or store:PACKAGE/NAME (never \
                 the value itself)"
            )
        };
        let (kind, rest) = s.split_once(':').ok_or_else(bad)?;
        if rest.is_empty() {
            return Err(bad());
        }
        match kind {
            "env" if !rest.contains('=') && !rest.contains('\0') => {
                Ok(SecretSource::Env(rest.into()))
            }
            "file" => Ok(SecretSource::File(rest.into())),
            "store" => match rest.split_once('/') {
                Some((p, n)) if !p.is_empty() && !n.is_empty() => Ok(SecretSource::Store {
                    package: p.into(),
                    name: n.into(),
                }),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }
}

impl std::fmt::Display for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretSource::Env(v) => write!(f, "env:{v}"),
            SecretSource::File(p) => write!(f, "file:{}", p.display()),
            SecretSource::Store { package, name } => write!(f, "store:{package}/{name}"),
        }
    }
}

fn ser_patterns<S: serde::Serializer>(
    v: &[cordon_egress::HostPattern],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(ToString::to_string))
}
