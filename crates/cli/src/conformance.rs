//! `cordon conformance` (and `cargo xtask conformance`, which runs it).

use std::process::ExitCode;

use clap::Args;
use cordon_conformance::StandardSuite;
use cordon_core::{ConformanceReport, ConformanceSuite, ProbeId};

use crate::{backends, BackendArg};

#[derive(Args)]
pub struct ConformanceArgs {
    #[command(flatten)]
    backend: BackendArg,
    /// Print the report as JSON only (schema: cordon.conformance/1).
    #[arg(long)]
    json: bool,
    /// Run only this probe (repeatable). A partial run never conforms.
    #[arg(long = "probe", value_name = "P1..P8", value_parser = crate::parse_probe_id)]
    probes: Vec<ProbeId>,
}

pub async fn main(args: ConformanceArgs) -> ExitCode {
    let backend = match backends::by_name(&args.backend.backend, args.backend.tier.as_deref()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cordon: {e}");
            return ExitCode::from(2);
        }
    };
    let mut suite = StandardSuite::new().accept_unproven(args.backend.accept_unproven.clone());
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

/// The human-readable report: [`ConformanceReport::summary`], the one
/// renderer, with a final newline.
pub fn render(report: &ConformanceReport) -> String {
    format!("{}\n", report.summary())
}
