//! `cordon conformance` (and `cargo xtask conformance`, which runs it).

use std::process::ExitCode;

use clap::Args;
use cordon_conformance::StandardSuite;
use cordon_core::{ConformanceReport, ConformanceSuite, ProbeId, ProbeStatus};

use crate::{backends, BackendArg};

#[derive(Args)]
pub struct ConformanceArgs {
    #[command(flatten)]
    backend: BackendArg,
    /// Print the report as JSON only (schema: cordon.conformance/1).
    #[arg(long)]
    json: bool,
    /// Run only this probe (repeatable). A partial run never conforms.
    #[arg(long = "probe", value_name = "P1..P7", value_parser = parse_probe)]
    probes: Vec<ProbeId>,
}

fn parse_probe(s: &str) -> Result<ProbeId, String> {
    ProbeId::parse(s).ok_or_else(|| format!("`{s}` is not a probe; use P1 to P7"))
}

pub async fn main(args: ConformanceArgs) -> ExitCode {
    let backend = match backends::by_name(&args.backend.backend) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cordon: {e}");
            return ExitCode::from(2);
        }
    };
    let mut suite = StandardSuite::new();
    if !args.probes.is_empty() {
        suite = suite.only(args.probes);
    }
    let report = suite.run(backend).await;
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("cordon: cannot encode the report: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        print!("{}", render(&report));
    }
    if report.conforms() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The human-readable table.
pub fn render(report: &ConformanceReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let h = &report.host;
    let _ = writeln!(s, "Cordon conformance — backend `{}`", report.backend);
    let _ = write!(s, "host: {} {} uid {}", h.os, h.kernel_release, h.uid);
    for (k, v) in &h.backend_facts {
        let _ = write!(s, ", {k} {v}");
    }
    s.push('\n');
    if let Some(reason) = report.availability.reason() {
        let _ = writeln!(s, "backend unavailable: {reason}");
    }
    if !report.probes.is_empty() {
        let _ = writeln!(
            s,
            "\n{:<4} {:<28} {:<12} {:>9}",
            "", "probe", "status", "time"
        );
    }
    for p in &report.probes {
        let status = match p.status {
            ProbeStatus::Pass => "PASS",
            ProbeStatus::Fail => "FAIL",
            ProbeStatus::Unreachable => "UNREACHABLE",
        };
        let _ = writeln!(
            s,
            "{:<4} {:<28} {:<12} {:>7.1}ms",
            p.id, p.title, status, p.duration_ms
        );
        if p.status != ProbeStatus::Pass {
            for c in p.checks.iter().filter(|c| c.status != ProbeStatus::Pass) {
                let _ = writeln!(s, "       - {} ({:?}): {}", c.name, c.status, c.detail);
            }
        }
    }
    let _ = writeln!(s, "\ntotal: {:.1} ms", report.total_duration_ms);
    if report.availability.is_available() && report.probes.len() < ProbeId::ALL.len() {
        let _ = writeln!(
            s,
            "only {} of 7 probes ran: a partial run never conforms",
            report.probes.len()
        );
    }
    let _ = writeln!(
        s,
        "{}",
        if report.conforms() {
            "CONFORMS"
        } else {
            "NOT CONFORMING"
        }
    );
    s
}
