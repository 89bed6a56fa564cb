//! Policy files: one reviewed TOML for a tool's grants, masks, limits and
//! network (`cordon.toml` by convention, any name).
//!
//! [`from_toml`] parses one file's text strictly: an unknown key, a wrong
//! type or a bad value is an error naming the file, the line and the key.
//! [`PolicyFile::load`] reads a file (refusing one that another user could
//! have written, like the report cache), follows its `extends` and merges
//! everything in order; [`PolicyFile::apply`] puts the result into a
//! [`RunnerConfig`](crate::RunnerConfig) and a [`ChildSpec`](crate::ChildSpec). Nothing here ever looks for a
//! file by itself: a policy is read only from a path the caller names.
//!
//! The format, key by key, is in [`REFERENCE`](super::REFERENCE) (rendered into
//! `docs/policy-format.md` by `cargo xtask docs`).
//!
//! ```
//! use cordon_core::policy::{from_toml, Expansions};
//! let vars = Expansions { home: Some("/home/ada".into()), cwd: "/src/app".into() };
//! let p = from_toml(
//!     "[fs]\nro = [\"${HOME}\"]\nmask = [\"${HOME}/.ssh\"]\n[limits]\nmemory = \"256M\"\n",
//!     "tool.toml".as_ref(),
//!     &vars,
//! )
//! .unwrap();
//! assert_eq!(p.limits.memory_bytes.unwrap().value, 256 << 20);
//! assert!(from_toml("[fs]\nrox = []\n", "bad.toml".as_ref(), &vars)
//!     .unwrap_err()
//!     .to_string()
//!     .starts_with("bad.toml:2: `fs.rox`"));
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::expand::{expand_env_value, expand_path, valid_env_name};
use super::mask::MaskPattern;
use super::secrets::{SecretBinding, SecretSource};
use super::LimitScope;

/// How many files deep `extends` may go.
pub const MAX_EXTENDS_DEPTH: usize = 8;

/// The largest policy file read (bytes).
pub const MAX_POLICY_BYTES: u64 = 1 << 20;

/// A bad policy file: where, which key, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}{}: {message}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default(), key.as_ref().map(|k| format!(": `{k}`")).unwrap_or_default())]
pub struct PolicyError {
    /// The file.
    pub file: PathBuf,
    /// The line (1-based), when the error has one.
    pub line: Option<usize>,
    /// The key (`section.key`), when the error has one.
    pub key: Option<String>,
    /// What is wrong, and what to do.
    pub message: String,
}

/// Where a setting came from: for `cordon policy check` and errors.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Origin {
    /// The file.
    pub file: PathBuf,
    /// The line (1-based).
    pub line: usize,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// A value and the line that set it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Entry<T> {
    /// The value, expanded.
    pub value: T,
    /// Where it was set.
    pub origin: Origin,
}

/// What `${...}` expands to. Nothing else is expanded, and there is no
/// shell: `~`, `$VAR` and `$(...)` are errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expansions {
    /// `${HOME}`: the caller's home directory (an error where unset).
    pub home: Option<PathBuf>,
    /// `${CWD}`: the caller's working directory.
    pub cwd: PathBuf,
}

impl Expansions {
    /// `$HOME` and the current directory of this process.
    pub fn from_env() -> std::io::Result<Expansions> {
        Ok(Expansions {
            home: std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from),
            cwd: std::env::current_dir()?,
        })
    }
}

/// The scratch setting of a file: `"fresh"`, `"keep"` or a directory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScratchSetting {
    /// A fresh dir, discarded afterwards ([`Scratch::Fresh`](crate::Scratch::Fresh)).
    Fresh,
    /// A fresh dir, kept ([`Scratch::FreshKept`](crate::Scratch::FreshKept)).
    Keep,
    /// The caller's dir ([`Scratch::Existing`](crate::Scratch::Existing)).
    Dir(PathBuf),
}

/// An `[env] set` value: text, or a path inside the scratch dir
/// (`${CORDON_SCRATCH}/rel`), which is known only at spawn.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvValue {
    /// Set as is.
    Text(String),
    /// The scratch dir joined with this relative path.
    InScratch(PathBuf),
}

/// The `[limits]` of a policy: each value with the line that set it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LimitSettings {
    /// `memory`: [`Limits::memory_bytes`](super::Limits::memory_bytes).
    pub memory_bytes: Option<Entry<u64>>,
    /// `cpu` (seconds): [`Limits::cpu_ms`](super::Limits::cpu_ms).
    pub cpu_ms: Option<Entry<u64>>,
    /// `processes`: [`Limits::max_processes`](super::Limits::max_processes).
    pub max_processes: Option<Entry<u64>>,
    /// `disk`: [`Limits::disk_bytes`](super::Limits::disk_bytes).
    pub disk_bytes: Option<Entry<u64>>,
    /// `open_files`: [`Limits::open_files`](super::Limits::open_files).
    pub open_files: Option<Entry<u64>>,
    /// `file_size`: [`Limits::file_size_bytes`](super::Limits::file_size_bytes).
    pub file_size_bytes: Option<Entry<u64>>,
    /// `memory_scope`, `cpu_scope`, `processes_scope`, `disk_scope`.
    pub scopes: BTreeMap<String, Entry<LimitScope>>,
}

/// A policy after `extends` and expansion: what `cordon policy show`
/// prints. Lists add up in reading order; a scalar set later wins.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PolicyFile {
    /// The files read, in merge order (each file after those it extends).
    pub files: Vec<PathBuf>,
    /// `[fs] ro`: read (and, for a directory, execute the programs in it).
    pub read_only: Vec<Entry<PathBuf>>,
    /// `[fs] rw`: read and write.
    pub read_write: Vec<Entry<PathBuf>>,
    /// `[fs] rw_review`: directories written through a review layer
    /// (`cordon run --rw-review`); the caller makes the layers.
    pub read_write_review: Vec<Entry<PathBuf>>,
    /// `[fs] exec`: read and execute (a file alone, or a directory).
    pub executable: Vec<Entry<PathBuf>>,
    /// `[fs] mask`: hidden inside the grants.
    #[serde(serialize_with = "ser_masks")]
    pub masks: Vec<Entry<MaskPattern>>,
    /// `[env] pass`: host variables passed through when set.
    pub env_pass: Vec<Entry<String>>,
    /// `[env] set`.
    pub env_set: BTreeMap<String, Entry<EnvValue>>,
    /// `[limits]`.
    pub limits: LimitSettings,
    /// `[network] allow`, then `[network] private` as private ranges.
    #[serde(serialize_with = "ser_hosts")]
    pub network: Vec<Entry<cordon_egress::HostPattern>>,
    /// `[network] rules`: request rules (methods and paths per host).
    #[serde(serialize_with = "ser_display")]
    pub rules: Vec<Entry<cordon_egress::RequestRule>>,
    /// `[network] upstream_ca`: a PEM file of CAs the broker trusts for
    /// upstream servers, beyond the WebPKI roots.
    pub upstream_ca: Option<Entry<PathBuf>>,
    /// `[secrets.NAME]`: credentials the program uses but never holds.
    pub secrets: BTreeMap<String, Entry<SecretBinding>>,
    /// `timeout` (seconds).
    pub timeout: Option<Entry<Duration>>,
    /// `scratch`.
    pub scratch: Option<Entry<ScratchSetting>>,
    /// `tty`: the program gets a terminal of its own
    /// ([`StdioMode::Terminal`](crate::StdioMode::Terminal)); the caller
    /// (`cordon run`) sets it, since it needs a terminal to relay.
    pub tty: Option<Entry<bool>>,
}

fn ser_display<S: serde::Serializer, T: std::fmt::Display>(
    v: &[Entry<T>],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|e| Entry {
        value: e.value.to_string(),
        origin: e.origin.clone(),
    }))
}

fn ser_masks<S: serde::Serializer>(v: &[Entry<MaskPattern>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|e| Entry {
        value: e.value.to_string(),
        origin: e.origin.clone(),
    }))
}

fn ser_hosts<S: serde::Serializer>(
    v: &[Entry<cordon_egress::HostPattern>],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|e| Entry {
        value: e.value.to_string(),
        origin: e.origin.clone(),
    }))
}

// ---- the file as written -------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    extends: Vec<Spanned<String>>,
    timeout: Option<Spanned<f64>>,
    scratch: Option<Spanned<String>>,
    tty: Option<Spanned<bool>>,
    #[serde(default)]
    fs: RawFs,
    #[serde(default)]
    env: RawEnv,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    network: RawNetwork,
    #[serde(default)]
    secrets: BTreeMap<String, RawSecret>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecret {
    from: Spanned<String>,
    hosts: Vec<Spanned<String>>,
    header: Option<Spanned<String>>,
    env: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFs {
    #[serde(default)]
    ro: Vec<Spanned<String>>,
    #[serde(default)]
    rw: Vec<Spanned<String>>,
    #[serde(default)]
    rw_review: Vec<Spanned<String>>,
    #[serde(default)]
    exec: Vec<Spanned<String>>,
    #[serde(default)]
    mask: Vec<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawEnv {
    #[serde(default)]
    pass: Vec<Spanned<String>>,
    #[serde(default)]
    set: BTreeMap<String, Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory: Option<Spanned<Size>>,
    memory_scope: Option<Spanned<ScopeName>>,
    cpu: Option<Spanned<f64>>,
    cpu_scope: Option<Spanned<ScopeName>>,
    processes: Option<Spanned<u64>>,
    processes_scope: Option<Spanned<ScopeName>>,
    disk: Option<Spanned<Size>>,
    disk_scope: Option<Spanned<ScopeName>>,
    open_files: Option<Spanned<u64>>,
    file_size: Option<Spanned<Size>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawNetwork {
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    #[serde(default)]
    private: Vec<Spanned<String>>,
    #[serde(default)]
    rules: Vec<Spanned<String>>,
    upstream_ca: Option<Spanned<String>>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum ScopeName {
    Sandbox,
    Process,
}

/// A size: bytes as an integer, or a string with a K, M or G suffix.
#[derive(Clone, Copy)]
struct Size(u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a size: bytes, or a string such as \"64K\", \"256M\", \"2G\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Size, E> {
                super::parse_size(v).map(Size).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

// ---- parsing one file ----------------------------------------------------

/// Parses one policy file's text; `file` names it in errors. `extends`
/// is checked but not followed: [`PolicyFile::load`] follows it, relative
/// to the real directory of the file it reads.
pub fn from_toml(text: &str, file: &Path, vars: &Expansions) -> Result<PolicyFile, PolicyError> {
    parse(text, file, vars).map(|(p, _)| p)
}

pub(super) fn parse(
    text: &str,
    file: &Path,
    vars: &Expansions,
) -> Result<(PolicyFile, Vec<Entry<PathBuf>>), PolicyError> {
    let raw: Raw = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start));
        PolicyError {
            file: file.to_path_buf(),
            line,
            key: e.span().and_then(|s| key_at(text, s.start, e.message())),
            message: e.message().trim().to_string(),
        }
    })?;
    let at = |span: std::ops::Range<usize>| Origin {
        file: file.to_path_buf(),
        line: line_of(text, span.start),
    };
    let bad = |span: std::ops::Range<usize>, key: &str, message: String| PolicyError {
        file: file.to_path_buf(),
        line: Some(line_of(text, span.start)),
        key: Some(key.to_string()),
        message,
    };
    let path = |s: &Spanned<String>, key: &str| -> Result<Entry<PathBuf>, PolicyError> {
        let p = expand_path(s.get_ref(), vars).map_err(|m| bad(s.span(), key, m))?;
        Ok(Entry {
            value: p,
            origin: at(s.span()),
        })
    };
    let paths = |v: &[Spanned<String>], key: &str| -> Result<Vec<Entry<PathBuf>>, PolicyError> {
        v.iter().map(|s| path(s, key)).collect()
    };
    let mut out = PolicyFile {
        files: vec![file.to_path_buf()],
        read_only: paths(&raw.fs.ro, "fs.ro")?,
        read_write: paths(&raw.fs.rw, "fs.rw")?,
        read_write_review: paths(&raw.fs.rw_review, "fs.rw_review")?,
        executable: paths(&raw.fs.exec, "fs.exec")?,
        ..PolicyFile::default()
    };
    for m in &raw.fs.mask {
        let p = path(m, "fs.mask")?;
        let pattern = MaskPattern::new(p.value).map_err(|e| bad(m.span(), "fs.mask", e))?;
        out.masks.push(Entry {
            value: pattern,
            origin: p.origin,
        });
    }
    for p in &raw.env.pass {
        if !valid_env_name(p.get_ref()) {
            return Err(bad(
                p.span(),
                "env.pass",
                format!("`{}` is not a variable name", p.get_ref()),
            ));
        }
        out.env_pass.push(Entry {
            value: p.get_ref().clone(),
            origin: at(p.span()),
        });
    }
    for (k, v) in &raw.env.set {
        if !valid_env_name(k) {
            return Err(bad(
                v.span(),
                "env.set",
                format!("`{k}` is not a variable name"),
            ));
        }
        let value = expand_env_value(v.get_ref(), vars).map_err(|m| bad(v.span(), "env.set", m))?;
        out.env_set.insert(
            k.clone(),
            Entry {
                value,
                origin: at(v.span()),
            },
        );
    }
    let l = &raw.limits;
    let whole = |v: &Option<Spanned<Size>>| {
        v.as_ref().map(|s| Entry {
            value: s.get_ref().0,
            origin: at(s.span()),
        })
    };
    let count = |v: &Option<Spanned<u64>>| {
        v.as_ref().map(|s| Entry {
            value: *s.get_ref(),
            origin: at(s.span()),
        })
    };
    out.limits.memory_bytes = whole(&l.memory);
    out.limits.disk_bytes = whole(&l.disk);
    out.limits.file_size_bytes = whole(&l.file_size);
    out.limits.max_processes = count(&l.processes);
    out.limits.open_files = count(&l.open_files);
    if let Some(c) = &l.cpu {
        let d = seconds(*c.get_ref()).map_err(|m| bad(c.span(), "limits.cpu", m))?;
        out.limits.cpu_ms = Some(Entry {
            value: u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            origin: at(c.span()),
        });
    }
    for (name, scope) in [
        ("memory", &l.memory_scope),
        ("cpu", &l.cpu_scope),
        ("processes", &l.processes_scope),
        ("disk", &l.disk_scope),
    ] {
        if let Some(s) = scope {
            out.limits.scopes.insert(
                name.to_string(),
                Entry {
                    value: match s.get_ref() {
                        ScopeName::Sandbox => LimitScope::Sandbox,
                        ScopeName::Process => LimitScope::PerProcess,
                    },
                    origin: at(s.span()),
                },
            );
        }
    }
    for h in &raw.network.allow {
        let value = h
            .get_ref()
            .parse::<cordon_egress::HostPattern>()
            .map_err(|e| bad(h.span(), "network.allow", e.to_string()))?;
        out.network.push(Entry {
            value,
            origin: at(h.span()),
        });
    }
    for r in &raw.network.private {
        let range = r
            .get_ref()
            .parse::<cordon_egress::IpRange>()
            .map_err(|e| bad(r.span(), "network.private", e.to_string()))?;
        out.network.push(Entry {
            value: cordon_egress::HostPattern::private_range(range),
            origin: at(r.span()),
        });
    }
    for r in &raw.network.rules {
        let value = r
            .get_ref()
            .parse::<cordon_egress::RequestRule>()
            .map_err(|e| bad(r.span(), "network.rules", e.to_string()))?;
        out.rules.push(Entry {
            value,
            origin: at(r.span()),
        });
    }
    if let Some(c) = &raw.network.upstream_ca {
        out.upstream_ca = Some(path(c, "network.upstream_ca")?);
    }
    for (name, t) in &raw.secrets {
        let key = format!("secrets.{name}");
        let r = t;
        let from = match SecretSource::parse(r.from.get_ref())
            .map_err(|m| bad(r.from.span(), &format!("{key}.from"), m))?
        {
            SecretSource::File(_) => {
                let raw_path = r.from.get_ref()["file:".len()..].to_string();
                let spanned = Spanned::new(r.from.span(), raw_path);
                SecretSource::File(path(&spanned, &format!("{key}.from"))?.value)
            }
            other => other,
        };
        let mut hosts = Vec::new();
        for h in &r.hosts {
            hosts.push(
                h.get_ref()
                    .parse::<cordon_egress::HostPattern>()
                    .map_err(|e| bad(h.span(), &format!("{key}.hosts"), e.to_string()))?,
            );
        }
        out.secrets.insert(
            name.clone(),
            Entry {
                value: SecretBinding {
                    from,
                    hosts,
                    header: r.header.as_ref().map(|h| h.get_ref().clone()),
                    env: r
                        .env
                        .as_ref()
                        .map_or_else(|| name.clone(), |e| e.get_ref().clone()),
                },
                origin: at(r.from.span()),
            },
        );
    }
    if let Some(t) = &raw.timeout {
        out.timeout = Some(Entry {
            value: seconds(*t.get_ref()).map_err(|m| bad(t.span(), "timeout", m))?,
            origin: at(t.span()),
        });
    }
    if let Some(t) = &raw.tty {
        out.tty = Some(Entry {
            value: *t.get_ref(),
            origin: at(t.span()),
        });
    }
    if let Some(s) = &raw.scratch {
        let value = match s.get_ref().as_str() {
            "fresh" => ScratchSetting::Fresh,
            "keep" => ScratchSetting::Keep,
            _ => ScratchSetting::Dir(path(s, "scratch")?.value),
        };
        out.scratch = Some(Entry {
            value,
            origin: at(s.span()),
        });
    }
    let mut extends = Vec::new();
    for e in &raw.extends {
        if e.get_ref().contains('$') || Path::new(e.get_ref()).is_absolute() {
            return Err(bad(
                e.span(),
                "extends",
                "an `extends` path is relative to this file's directory, with no `${...}`".into(),
            ));
        }
        extends.push(Entry {
            value: PathBuf::from(e.get_ref()),
            origin: at(e.span()),
        });
    }
    Ok((out, extends))
}

mod text;
#[allow(unused_imports)]
use text::*;
