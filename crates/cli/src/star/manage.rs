//! `cordon star install|list|show|grant|revoke|secret|provider|migrate`:
//! the operator's commands on the store database — a SQLite file
//! (`SqliteStore`) or a PostgreSQL database several hosts share
//! (`PgStore`), both driven through `StoreAdmin`.
//!
//! Every command takes `--db` (a path, or a `postgres://` URL without a
//! password; default `CORDON_STORE_URL` if set, else
//! `$XDG_DATA_HOME/cordon/star.db`) and `--key-file` (default
//! `$XDG_CONFIG_HOME/cordon/store.key`, made on first use of a new SQLite
//! file or by `migrate` of a new PostgreSQL database; `CORDON_STORE_KEY`
//! wins over it), and prints one JSON object with `--json`. Secret values and provider keys are read from stdin,
//! never from the command line (where `ps` and shell history would see
//! them). Bad input is one line on stderr and exit 125, with nothing
//! changed.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Subcommand;
use cordon_egress::IpRange;
use cordon_starlark::{
    is_postgres_url, load_package_from_path, ApiKey, KeyOrigin, PasswordSource, Permission,
    PgConfig, PgOptions, PgStore, ProviderConfig, ProviderScope, SqliteStore, StoreAdmin, StoreKey,
    STORE_URL_ENV,
};
use serde_json::json;

use super::{parse_perm, StarCommand};
use crate::EXIT_CORDON_FAILED;

/// Where the store database and its key are.
#[derive(clap::Args, Clone, Default)]
pub struct StoreLocation {
    /// The store database: a SQLite file, or a PostgreSQL URL
    /// (postgres://USER@HOST:PORT/DB?sslmode=require; its password from
    /// PGPASSWORD or the URL in CORDON_STORE_URL, never here)
    /// [default: $CORDON_STORE_URL, else $XDG_DATA_HOME/cordon/star.db].
    #[arg(long, value_name = "PATH|URL")]
    db: Option<String>,
    /// The file holding the store key, made (0600) on first use; the
    /// CORDON_STORE_KEY variable (64 hex digits) wins over it
    /// [default: $XDG_CONFIG_HOME/cordon/store.key].
    #[arg(long, value_name = "PATH")]
    key_file: Option<PathBuf>,
}

/// The store, and `--json`.
#[derive(clap::Args)]
pub struct StoreArgs {
    #[command(flatten)]
    store: StoreLocation,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct InstallArgs {
    /// A package directory (with package.toml) or a single .star file.
    path: PathBuf,
    /// Replace an installed package whose sources changed (its grants and
    /// secrets are kept).
    #[arg(long)]
    upgrade: bool,
    #[command(flatten)]
    common: StoreArgs,
}

#[derive(clap::Args)]
pub struct ShowArgs {
    /// The package id.
    id: String,
    #[command(flatten)]
    common: StoreArgs,
}

#[derive(clap::Args)]
pub struct GrantArgs {
    /// The package id.
    id: String,
    /// Permissions: secrets.read, notifications.send, api.http, provider.complete.
    #[arg(required = true, value_parser = parse_perm)]
    permissions: Vec<Permission>,
    /// Who grants (or revokes), for the record [default: $USER].
    #[arg(long)]
    user: Option<String>,
    /// With api.http: let the package's targets be in, or resolve into,
    /// this loopback, private or link-local range (repeatable), e.g.
    /// `--allow-private 10.0.0.0/8` for git.corp, or 127.0.0.1/32 for a
    /// target on this host. The manifest alone never approves one.
    #[arg(long = "allow-private", value_name = "CIDR")]
    allow_private: Vec<IpRange>,
    #[command(flatten)]
    common: StoreArgs,
}

#[derive(Subcommand)]
pub enum SecretCommand {
    /// Set a secret; its value is read from stdin (one trailing newline
    /// dropped).
    Set {
        /// The package id.
        id: String,
        /// The secret's name (what `secrets.get` asks for).
        name: String,
        #[command(flatten)]
        common: StoreArgs,
    },
    /// Remove a secret.
    Rm {
        /// The package id.
        id: String,
        /// The secret's name.
        name: String,
        #[command(flatten)]
        common: StoreArgs,
    },
}

#[derive(Subcommand)]
pub enum ProviderCommand {
    /// Set a provider; its API key is read from stdin. Without --user,
    /// --channel or --package it is the host's default.
    Set {
        /// For this user.
        #[arg(long, group = "scope")]
        user: Option<String>,
        /// For this channel.
        #[arg(long, group = "scope")]
        channel: Option<String>,
        /// For this package.
        #[arg(long, group = "scope")]
        package: Option<String>,
        /// The OpenAI-compatible base URL, e.g. `https://api.openai.com/v1`.
        #[arg(long)]
        base_url: String,
        /// The default model.
        #[arg(long)]
        model: String,
        #[command(flatten)]
        common: StoreArgs,
    },
}

fn default_path(xdg: &str, fallback: &str, file: &str) -> Result<PathBuf, String> {
    let base = match std::env::var_os(xdg).filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => std::env::var_os("HOME")
            .filter(|v| !v.is_empty())
            .map(|h| PathBuf::from(h).join(fallback))
            .ok_or_else(|| format!("neither {xdg} nor HOME is set: pass --db and --key-file"))?,
    };
    Ok(base.join("cordon").join(file))
}

/// Where the store is: a file, or a PostgreSQL database.
enum Location {
    File(PathBuf),
    Postgres(Box<PgConfig>),
}

fn location(loc: &StoreLocation) -> Result<Location, String> {
    let url =
        |u: &str, source| PgConfig::from_url(u, source).map(|c| Location::Postgres(Box::new(c)));
    match &loc.db {
        Some(db) if is_postgres_url(db) => url(db, PasswordSource::Argv),
        Some(path) => Ok(Location::File(PathBuf::from(path))),
        None => match std::env::var(STORE_URL_ENV) {
            Ok(u) if !u.is_empty() => {
                url(&u, PasswordSource::Private).map_err(|e| format!("{STORE_URL_ENV}: {e}"))
            }
            _ => default_path("XDG_DATA_HOME", ".local/share", "star.db").map(Location::File),
        },
    }
}

/// Opens the store at `loc`, with its key (reported on stderr when a new
/// key file was made). A new key is made for a SQLite file that does not
/// exist yet, and for a PostgreSQL database only by `migrate` (every host
/// of a shared database needs the same key: a host without it must not
/// make its own).
pub async fn open_store(
    loc: &StoreLocation,
    migrating: bool,
) -> Result<Arc<dyn StoreAdmin>, String> {
    let key_file = match &loc.key_file {
        Some(p) => p.clone(),
        None => default_path("XDG_CONFIG_HOME", ".config", "store.key")?,
    };
    let at = location(loc)?;
    let fresh = match &at {
        // Whether anything is at the path (a dangling symlink too: it is
        // refused below, and must not make a fresh key first).
        Location::File(db) => std::fs::symlink_metadata(db).is_err(),
        Location::Postgres(_) => migrating,
    };
    let (key, origin) = StoreKey::from_env_or_file(&key_file, fresh)?;
    let store: Result<Arc<dyn StoreAdmin>, String> = match &at {
        Location::File(db) => SqliteStore::open(db, &key).map(|s| Arc::new(s) as _),
        Location::Postgres(cfg) => PgStore::connect(cfg, &key, PgOptions::default())
            .await
            .map(|s| Arc::new(s) as _),
    };
    if let KeyOrigin::Created(path) = &origin {
        if store.is_err() {
            // A key nothing was sealed with: not kept to confuse anyone.
            let _ = std::fs::remove_file(path);
        } else {
            let _ = writeln!(
                std::io::stderr(),
                "cordon: made a new store key in {} (keep it: the secrets in the store open \
                 only with it; every host of a shared store needs it)",
                path.display()
            );
        }
    }
    store
}

/// The files of the store at its usual place: its SQLite database (none
/// for PostgreSQL) and its key file.
pub fn store_files() -> Result<Vec<PathBuf>, String> {
    let loc = StoreLocation::default();
    let mut files = Vec::new();
    if let Location::File(db) = location(&loc)? {
        files.push(db);
    }
    files.push(default_path("XDG_CONFIG_HOME", ".config", "store.key")?);
    Ok(files)
}

/// The value of secret `name` of package `package` in the store at its
/// usual place (`CORDON_STORE_URL`, else the user's SQLite file; its key
/// from `CORDON_STORE_KEY` or the key file): `cordon run --secret
/// K=store:PACKAGE/NAME`. A store that does not exist is an error, never
/// made.
pub async fn read_secret(package: &str, name: &str) -> Result<String, String> {
    let loc = StoreLocation::default();
    if let Location::File(db) = location(&loc)? {
        if std::fs::symlink_metadata(&db).is_err() {
            return Err(format!(
                "there is no store at {} (set one up with cordon star install and cordon star \
                 secret set, or point CORDON_STORE_URL at it)",
                db.display()
            ));
        }
    }
    let store = open_store(&loc, false).await?;
    match cordon_starlark::SecretStore::get(&*store, package, name).await {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err(format!(
            "the store has no secret {name} for package {package} (cordon star secret set)"
        )),
        Err(e) => Err(format!("the store could not be read: {e}")),
    }
}

fn who(user: &Option<String>) -> String {
    user.clone()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| {
            // SAFETY: geteuid has no preconditions.
            format!("uid {}", unsafe { libc::geteuid() })
        })
}

/// Reads a secret value from stdin (one trailing newline dropped).
pub(super) fn read_stdin(what: &str) -> Result<String, String> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .map_err(|e| format!("cannot read the {what} from stdin: {e}"))?;
    if s.ends_with('\n') {
        s.pop();
        if s.ends_with('\r') {
            s.pop();
        }
    }
    if s.is_empty() {
        return Err(format!(
            "no {what} on stdin (pipe it in: printf %s \"$VALUE\" | cordon …)"
        ));
    }
    Ok(s)
}

/// Runs one management command.
pub async fn main(cmd: StarCommand) -> ExitCode {
    match manage(cmd).await {
        // A closed stdout or stderr is not worth a panic.
        Ok((json, value, text)) => {
            if json {
                let _ = writeln!(std::io::stdout(), "{value}");
            } else if !text.is_empty() {
                let _ = writeln!(std::io::stdout(), "{text}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "cordon: {e}");
            ExitCode::from(EXIT_CORDON_FAILED)
        }
    }
}

type Done = (bool, serde_json::Value, String);

async fn manage(cmd: StarCommand) -> Result<Done, String> {
    match cmd {
        StarCommand::Run(_) => unreachable!("`star run` is handled by star::main"),
        StarCommand::Migrate(a) => {
            let version = open_store(&a.store, true).await?.schema_version().await?;
            let v = json!({ "schema_version": version });
            Ok((
                a.json,
                v,
                format!("the store's schema is at version {version}"),
            ))
        }
        StarCommand::Install(a) => {
            let pkg = load_package_from_path(&a.path).map_err(|e| e.to_string())?;
            let store = open_store(&a.common.store, false).await?;
            let outcome = store.install(&pkg, a.upgrade).await?;
            let v =
                json!({"package": pkg.id, "outcome": outcome, "source_hash": pkg.script_hash()});
            let text = format!(
                "{} {} ({})",
                pkg.id,
                v["outcome"].as_str().unwrap_or("?"),
                v["source_hash"].as_str().unwrap_or("?")
            );
            Ok((a.common.json, v, text))
        }
        StarCommand::List(a) => {
            let list = open_store(&a.store, false).await?.packages().await?;
            let text = list
                .iter()
                .map(|p| {
                    let grants: Vec<String> = p
                        .grants
                        .iter()
                        .map(|g| match g.status {
                            "active" => g.permission.as_str().to_owned(),
                            s => format!("{}({s})", g.permission),
                        })
                        .collect();
                    let status = json!(p.status);
                    let status = status.as_str().unwrap_or("?");
                    format!("{}\t{}\t{status}\t{}", p.id, p.version, grants.join(","))
                })
                .collect::<Vec<_>>()
                .join("\n");
            Ok((a.json, json!({ "packages": list }), text))
        }
        StarCommand::Show(a) => {
            let rec = open_store(&a.common.store, false)
                .await?
                .package_record(&a.id)
                .await?
                .ok_or_else(|| format!("package {:?} is not installed", a.id))?;
            let v = serde_json::to_value(&rec).map_err(|e| e.to_string())?;
            let text = serde_json::to_string_pretty(&rec).map_err(|e| e.to_string())?;
            Ok((a.common.json, v, text))
        }
        StarCommand::Grant(a) => {
            let store = open_store(&a.common.store, false).await?;
            let by = who(&a.user);
            store
                .grant(&a.id, &a.permissions, &by, &a.allow_private)
                .await?;
            let names: Vec<&str> = a.permissions.iter().map(|p| p.as_str()).collect();
            let ranges: Vec<String> = a.allow_private.iter().map(|r| r.to_string()).collect();
            let v = json!({"package": a.id, "granted": names, "by": by, "private": ranges});
            Ok((
                a.common.json,
                v,
                format!("granted {} to {}", names.join(", "), a.id),
            ))
        }
        StarCommand::Revoke(a) => {
            if !a.allow_private.is_empty() {
                return Err("--allow-private is for grant: revoke api.http to drop it".into());
            }
            let store = open_store(&a.common.store, false).await?;
            let by = who(&a.user);
            let mut revoked = Vec::new();
            for p in &a.permissions {
                if store.revoke(&a.id, *p, &by).await? {
                    revoked.push(p.as_str());
                }
            }
            let v = json!({"package": a.id, "revoked": revoked, "by": by});
            Ok((
                a.common.json,
                v,
                format!("revoked {} of {}", revoked.join(", "), a.id),
            ))
        }
        StarCommand::Secret(SecretCommand::Set { id, name, common }) => {
            let store = open_store(&common.store, false).await?;
            if store.package_record(&id).await?.is_none() {
                return Err(format!("package {id:?} is not installed"));
            }
            let value = read_stdin("secret value")?;
            store.set_secret(&id, &name, &value).await?;
            let v = json!({"package": id, "secret": name, "set": true});
            Ok((common.json, v, format!("set secret {name} of {id}")))
        }
        StarCommand::Secret(SecretCommand::Rm { id, name, common }) => {
            let removed = open_store(&common.store, false)
                .await?
                .remove_secret(&id, &name)
                .await?;
            let v = json!({"package": id, "secret": name, "removed": removed});
            let text = if removed {
                format!("removed secret {name} of {id}")
            } else {
                format!("{id} had no secret {name}")
            };
            Ok((common.json, v, text))
        }
        StarCommand::Provider(ProviderCommand::Set {
            user,
            channel,
            package,
            base_url,
            model,
            common,
        }) => {
            let scope = match (user, channel, package) {
                (Some(u), _, _) => ProviderScope::User(u),
                (_, Some(c), _) => ProviderScope::Channel(c),
                (_, _, Some(p)) => ProviderScope::Package(p),
                _ => ProviderScope::Host,
            };
            reqwest_like_url(&base_url)?;
            let store = open_store(&common.store, false).await?;
            let key = read_stdin("API key")?;
            store
                .set_provider(
                    &scope,
                    &ProviderConfig {
                        base_url: base_url.clone(),
                        api_key: ApiKey::new(key),
                        model: model.clone(),
                    },
                )
                .await?;
            let v = json!({"scope": format!("{scope:?}"), "base_url": base_url, "model": model});
            Ok((common.json, v, format!("set the provider for {scope:?}")))
        }
    }
}

/// A base URL must be http(s) with a host.
fn reqwest_like_url(url: &str) -> Result<(), String> {
    match url.split_once("://") {
        Some(("http" | "https", rest)) if !rest.is_empty() => Ok(()),
        _ => Err(format!("--base-url {url:?} is not an http(s) URL")),
    }
}
