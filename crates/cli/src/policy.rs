//! `cordon policy show|check`: what a policy file means, before anything
//! runs under it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use cordon_core::policy::{Access, Expansions, PolicyFile};

use crate::EXIT_CORDON_FAILED;

#[derive(Subcommand)]
pub enum PolicyCommand {
    /// Print the effective policy of FILE... (after `extends` and
    /// expansion, merged in the order given, as `cordon run --policy`
    /// would), with the line that set each entry.
    Show(ShowArgs),
    /// Say whether PATH would be readable (writable with --write,
    /// executable with --exec) under the policy, and by which line, or
    /// which mask hides it. Exit 0 if it would be, 1 if not.
    Check(CheckArgs),
}

#[derive(Args)]
pub struct ShowArgs {
    /// Policy files, later ones on top.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Print JSON instead.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct CheckArgs {
    /// The policy file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The path asked about.
    #[arg(value_name = "PATH")]
    path: PathBuf,
    /// Ask about writing.
    #[arg(long, conflicts_with = "exec")]
    write: bool,
    /// Ask about executing.
    #[arg(long)]
    exec: bool,
}

/// Reads and merges `files` as `cordon run --policy` does.
pub fn load_all(files: &[PathBuf]) -> Result<PolicyFile, String> {
    let vars = Expansions::from_env().map_err(|e| format!("cannot read the cwd: {e}"))?;
    let mut merged = PolicyFile::default();
    for f in files {
        merged.merge(PolicyFile::load(f, &vars).map_err(|e| e.to_string())?);
    }
    Ok(merged)
}

pub fn main(cmd: PolicyCommand) -> ExitCode {
    let result = match cmd {
        PolicyCommand::Show(a) => show(a),
        PolicyCommand::Check(a) => check(a),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("cordon: {message}");
            ExitCode::from(EXIT_CORDON_FAILED)
        }
    }
}

fn show(a: ShowArgs) -> Result<ExitCode, String> {
    let p = load_all(&a.files)?;
    p.check_masks(&[]).map_err(|e| e.to_string())?;
    p.check_out_of_reach(&[]).map_err(|e| e.to_string())?;
    for w in p.movable_masks(&[]) {
        eprintln!("cordon: warning: {w}");
    }
    if a.json {
        let text = serde_json::to_string_pretty(&p).map_err(|e| e.to_string())?;
        println!("{text}");
        return Ok(ExitCode::SUCCESS);
    }
    let files: Vec<String> = p.files.iter().map(|f| f.display().to_string()).collect();
    println!("# effective policy of {}", files.join(" + "));
    let list = |name: &str, v: Vec<(String, String)>| {
        for (value, at) in v {
            println!("{name:<18} {value:<40} # {at}");
        }
    };
    let paths = |v: &[cordon_core::policy::Entry<PathBuf>]| {
        v.iter()
            .map(|e| (e.value.display().to_string(), e.origin.to_string()))
            .collect()
    };
    list("fs.ro", paths(&p.read_only));
    list("fs.rw", paths(&p.read_write));
    list("fs.exec", paths(&p.executable));
    list(
        "fs.mask",
        p.masks
            .iter()
            .map(|e| (e.value.to_string(), e.origin.to_string()))
            .collect(),
    );
    list(
        "env.pass",
        p.env_pass
            .iter()
            .map(|e| (e.value.clone(), e.origin.to_string()))
            .collect(),
    );
    for (k, v) in &p.env_set {
        let value = match &v.value {
            cordon_core::policy::EnvValue::Text(t) => format!("{k}={t}"),
            cordon_core::policy::EnvValue::InScratch(r) => {
                format!("{k}=<scratch>/{}", r.display())
            }
        };
        println!("{:<18} {value:<40} # {}", "env.set", v.origin);
    }
    let l = &p.limits;
    for (name, v) in [
        ("limits.memory", &l.memory_bytes),
        ("limits.cpu_ms", &l.cpu_ms),
        ("limits.processes", &l.max_processes),
        ("limits.disk", &l.disk_bytes),
        ("limits.open_files", &l.open_files),
        ("limits.file_size", &l.file_size_bytes),
    ] {
        if let Some(e) = v {
            println!("{name:<18} {:<40} # {}", e.value, e.origin);
        }
    }
    for (name, e) in &l.scopes {
        println!(
            "{:<18} {:<40} # {}",
            format!("limits.{name}_scope"),
            e.value.as_str(),
            e.origin
        );
    }
    if p.network.is_empty() {
        println!(
            "{:<18} {:<40} # no `network.allow` anywhere",
            "network", "deny"
        );
    }
    list(
        "network.allow",
        p.network
            .iter()
            .map(|e| (e.value.to_string(), e.origin.to_string()))
            .collect(),
    );
    if let Some(t) = &p.timeout {
        println!(
            "{:<18} {:<40} # {}",
            "timeout",
            format!("{} s", t.value.as_secs_f64()),
            t.origin
        );
    }
    if let Some(s) = &p.scratch {
        println!(
            "{:<18} {:<40} # {}",
            "scratch",
            format!("{:?}", s.value),
            s.origin
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn check(a: CheckArgs) -> Result<ExitCode, String> {
    let p = load_all(std::slice::from_ref(&a.file))?;
    p.check_masks(&[]).map_err(|e| e.to_string())?;
    p.check_out_of_reach(&[]).map_err(|e| e.to_string())?;
    let access = match (a.write, a.exec) {
        (true, _) => Access::Write,
        (_, true) => Access::Execute,
        _ => Access::Read,
    };
    let path = if a.path.is_absolute() {
        a.path.clone()
    } else {
        std::env::current_dir()
            .map_err(|e| format!("cannot read the cwd: {e}"))?
            .join(&a.path)
    };
    let answer = p.check(&path, access);
    let verdict = if answer.allowed { "allowed" } else { "denied" };
    match &answer.by {
        Some(at) => println!("{verdict}: {}: {} ({at})", path.display(), answer.why),
        None => println!("{verdict}: {}: {}", path.display(), answer.why),
    }
    Ok(if answer.allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
