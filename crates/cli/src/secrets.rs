//! `cordon run`'s credential broker: the `[secrets.NAME]` bindings and
//! `network.rules` of the policy files and their flags, resolved into a
//! [`Broker`], the sandbox's trust bundle and the placeholders in the
//! program's environment.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use cordon_core::policy::{PolicyFile, SecretBinding, SecretSource};
use cordon_core::{ChildSpec, RunnerConfig};
use cordon_egress::{HostPattern, RequestRule};

#[cfg(all(target_os = "linux", feature = "broker"))]
mod broker_run;

/// The flags that mirror `[secrets.NAME]` and `network.rules` /
/// `network.upstream_ca`.
#[derive(Args, Default)]
pub struct SecretArgs {
    /// A credential the program uses but never holds (repeatable):
    /// NAME=SOURCE, the source `env:VAR` (cordon's own environment),
    /// `file:PATH` or `store:PACKAGE/NAME`. The program gets a per-run
    /// placeholder in $NAME; the proxy swaps the value in toward the
    /// --secret-host hosts only. A missing source refuses the run.
    #[arg(long = "secret", value_name = "NAME=SOURCE")]
    secret: Vec<String>,
    /// A host (exact name, HTTPS) secret NAME may go to (repeatable).
    #[arg(long = "secret-host", value_name = "NAME=HOST")]
    secret_host: Vec<String>,
    /// A header the proxy sets on every request to NAME's hosts, `{}`
    /// for the value (e.g. `GH=Authorization: Bearer {}`).
    #[arg(long = "secret-header", value_name = "NAME=TEMPLATE")]
    secret_header: Vec<String>,
    /// The variable holding NAME's placeholder (default NAME).
    #[arg(long = "secret-env", value_name = "NAME=VAR")]
    secret_env: Vec<String>,
    /// A request rule (repeatable): `METHODS https://HOST/PATH`; on a
    /// host with rules only what one allows passes (`*` a path segment,
    /// `**` any). The proxy terminates TLS to that host to check.
    #[arg(long = "rule", value_name = "METHODS URL")]
    rule: Vec<RequestRule>,
    /// A PEM file of CAs to trust for the servers the broker terminates
    /// toward (a private API), besides the WebPKI roots.
    #[arg(long = "upstream-ca", value_name = "FILE")]
    upstream_ca: Option<PathBuf>,
}

impl SecretArgs {
    /// Whether any flag asks for the broker.
    pub fn any(&self) -> bool {
        !self.secret.is_empty() || !self.rule.is_empty() || self.upstream_ca.is_some()
    }
}

/// What a run with a broker keeps until the program ends: the broker
/// (also held by the proxy) and the trust bundle's directory.
pub struct Brokering {
    _bundle: tempfile::TempDir,
}

fn split<'a>(flag: &str, s: &'a str) -> Result<(&'a str, &'a str), String> {
    s.split_once('=')
        .filter(|(n, v)| !n.is_empty() && !v.is_empty())
        .ok_or_else(|| format!("{flag} {s:?}: write NAME=VALUE"))
}

/// The bindings of the policy files, then the flags on top.
fn bindings(
    policy: Option<&PolicyFile>,
    args: &SecretArgs,
) -> Result<BTreeMap<String, SecretBinding>, String> {
    let mut out: BTreeMap<String, SecretBinding> = policy
        .map(|p| {
            p.secrets
                .iter()
                .map(|(k, e)| (k.clone(), e.value.clone()))
                .collect()
        })
        .unwrap_or_default();
    for s in &args.secret {
        let (name, source) = split("--secret", s)?;
        let from = SecretSource::parse(source)?;
        out.entry(name.to_owned())
            .and_modify(|b| b.from = from.clone())
            .or_insert_with(|| SecretBinding {
                from,
                hosts: Vec::new(),
                header: None,
                env: name.to_owned(),
            });
    }
    let named = |flag: &str, s: &str| -> Result<(String, String), String> {
        let (n, v) = split(flag, s)?;
        if !out.contains_key(n) && !args.secret.iter().any(|x| x.starts_with(&format!("{n}="))) {
            return Err(format!(
                "{flag} {s:?}: no secret {n} (give --secret {n}=SOURCE)"
            ));
        }
        Ok((n.to_owned(), v.to_owned()))
    };
    let mut hosts = Vec::new();
    for s in &args.secret_host {
        let (n, h) = named("--secret-host", s)?;
        let h: HostPattern = h.parse().map_err(|e| format!("--secret-host {s:?}: {e}"))?;
        hosts.push((n, h));
    }
    let mut headers = Vec::new();
    for s in &args.secret_header {
        headers.push(named("--secret-header", s)?);
    }
    let mut envs = Vec::new();
    for s in &args.secret_env {
        envs.push(named("--secret-env", s)?);
    }
    for (n, h) in hosts {
        out.get_mut(&n).expect("checked").hosts.push(h);
    }
    for (n, h) in headers {
        out.get_mut(&n).expect("checked").header = Some(h);
    }
    for (n, v) in envs {
        out.get_mut(&n).expect("checked").env = v;
    }
    Ok(out)
}

/// Sets the run up for the broker when the policy or the flags ask for
/// it: the secrets read, the broker made and put in `config.network`,
/// the trust bundle granted and named in the program's environment, the
/// placeholders in their variables. `None` when nothing asks for it.
pub async fn prepare(
    policy: Option<&PolicyFile>,
    args: &SecretArgs,
    config: &mut RunnerConfig,
    spec: &mut ChildSpec,
) -> Result<Option<Brokering>, String> {
    let bindings = bindings(policy, args)?;
    let mut rules: Vec<RequestRule> = policy
        .map(|p| p.rules.iter().map(|e| e.value.clone()).collect())
        .unwrap_or_default();
    rules.extend(args.rule.iter().cloned());
    let upstream_ca = args
        .upstream_ca
        .clone()
        .or_else(|| policy.and_then(|p| p.upstream_ca.as_ref().map(|e| e.value.clone())));
    if bindings.is_empty() && rules.is_empty() {
        if upstream_ca.is_some() {
            return Err(
                "--upstream-ca (network.upstream_ca) is for the hosts the broker terminates: \
                 name a secret or a request rule, or drop it"
                    .into(),
            );
        }
        return Ok(None);
    }
    #[cfg(all(target_os = "linux", feature = "broker"))]
    {
        broker_run::prepare(bindings, rules, upstream_ca, config, spec).await
    }
    #[cfg(not(all(target_os = "linux", feature = "broker")))]
    {
        let _ = (config, spec);
        Err(
            "this cordon has no credential broker (--secret, --rule): it runs on Linux, in a \
             build with the `broker` feature (the default)"
                .into(),
        )
    }
}
