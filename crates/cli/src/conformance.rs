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
    /// Also write the verdict as a node-feature-discovery local-source
    /// file (e.g. /etc/kubernetes/node-feature-discovery/features.d/cordon),
    /// which NFD publishes as the node labels
    /// `feature.node.kubernetes.io/cordon-conforming=true|false` and
    /// `…/cordon-backend=NAME`; it expires after 25 hours, so run this at
    /// boot and daily.
    #[arg(long, value_name = "FILE")]
    nfd: Option<std::path::PathBuf>,
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
    if let Some(path) = &args.nfd {
        let text = nfd_features(&report, time::OffsetDateTime::now_utc());
        if let Err(e) =
            cordon_core::hostfs::OutputFile::create(path).and_then(|f| f.commit(text.as_bytes()))
        {
            eprintln!("cordon: --nfd {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
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

/// How long a node's label outlives the run that wrote it: a node that
/// stops checking loses it.
const NFD_EXPIRY: time::Duration = time::Duration::hours(25);

/// The node-feature-discovery local-source file for `report`, written at
/// `now`: one `name=value` a line (NFD prefixes each name with
/// `feature.node.kubernetes.io/`), and the expiry directive NFD 0.14 and
/// later honour (older ones read it as a comment).
pub fn nfd_features(report: &ConformanceReport, now: time::OffsetDateTime) -> String {
    let rfc = |t: time::OffsetDateTime| {
        t.replace_nanosecond(0)
            .unwrap_or(t)
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default()
    };
    let failed: Vec<String> = report
        .probes
        .iter()
        .filter(|p| p.status != cordon_core::ProbeStatus::Pass)
        .map(|p| p.id.to_string())
        .collect();
    format!(
        "# written by `cordon conformance --nfd` at {}: {}\n\
         # +expiry-time={}\n\
         cordon-conforming={}\n\
         cordon-backend={}\n",
        rfc(now),
        if report.conforms() {
            "the backend conforms".to_string()
        } else {
            format!(
                "the backend does not conform (not passed: {})",
                if failed.is_empty() {
                    "none ran".to_string()
                } else {
                    failed.join(", ")
                }
            )
        },
        rfc(now + NFD_EXPIRY),
        report.conforms(),
        report.backend,
    )
}

/// The human-readable report: [`ConformanceReport::summary`], the one
/// renderer, with a final newline.
pub fn render(report: &ConformanceReport) -> String {
    format!("{}\n", report.summary())
}
