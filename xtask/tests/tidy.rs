//! Tidiness the compiler does not check, as rust-analyzer's `tidy` test
//! does: every Rust file opens with a `//!` line that says its job, the
//! paths the architecture docs name exist, and source files stay small
//! (the few that are not are listed here, to be split, and the list may
//! only shrink).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Source files (not tests) allowed over [`MAX_LINES`], with the reason
/// each is still long. A file that is split must leave this list (the test
/// fails while a listed file is short), and no new file may join it.
const LONG_FILES: &[(&str, &str)] = &[
    (
        "crates/conformance/src/probes/p6.rs",
        "P6: its registry entry and the per-process limits, both sides (its sandbox-wide checks are in p6/)",
    ),
    (
        "crates/conformance/src/probes/p5.rs",
        "P5: its registry entry and the filesystem checks, both sides",
    ),
];

const MAX_LINES: usize = 600;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace root")
        .to_path_buf()
}

/// Every `.rs` file of the project (not build output, not fuzz corpora).
fn rust_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || ["target", "corpus", "artifacts"].contains(&&*name) {
                continue;
            }
            if p.is_dir() {
                walk(&p, out);
            } else if name.ends_with(".rs") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for top in ["crates", "xtask", "examples", "benches", "fuzz"] {
        walk(&root().join(top), &mut out);
    }
    out.sort();
    assert!(out.len() > 50, "too few Rust files found: {}", out.len());
    out
}

fn relative(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

#[test]
fn every_rust_file_opens_with_its_job() {
    let missing: Vec<String> = rust_files()
        .iter()
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            !text.starts_with("//!")
        })
        .map(|p| relative(p))
        .collect();
    assert!(
        missing.is_empty(),
        "these files do not open with a `//!` line saying what they are for:\n{}",
        missing.join("\n")
    );
}

#[test]
fn source_files_stay_small() {
    let listed: BTreeSet<&str> = LONG_FILES.iter().map(|(p, _)| *p).collect();
    let mut problems = Vec::new();
    for p in rust_files() {
        let rel = relative(&p);
        // Test files are exempt: integration tests and unit-test modules.
        if rel.contains("/tests/") || rel.ends_with("/tests.rs") {
            continue;
        }
        let lines = std::fs::read_to_string(&p)
            .unwrap_or_default()
            .lines()
            .count();
        match (lines > MAX_LINES, listed.contains(rel.as_str())) {
            (true, false) => problems.push(format!(
                "{rel}: {lines} lines (over {MAX_LINES}): split it along its jobs"
            )),
            (false, true) => problems.push(format!(
                "{rel}: {lines} lines now: remove it from LONG_FILES in {}",
                file!()
            )),
            _ => {}
        }
    }
    for (p, _) in LONG_FILES {
        if !root().join(p).is_file() {
            problems.push(format!("{p}: listed in LONG_FILES but gone: remove it"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The path-like code spans of a Markdown text: `a/b.rs`, `crates/x`,
/// with `{a,b}` alternatives expanded. Placeholders (`pN.rs`, `<pid>`,
/// globs) are skipped: they name no one file.
fn named_paths(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, span) in markdown.split('`').enumerate() {
        if i % 2 == 0 || span.contains(char::is_whitespace) {
            continue;
        }
        let looks_like_path = [".rs", ".md", ".toml"].iter().any(|e| span.ends_with(e))
            || ["crates/", "xtask/", "docs/", "examples/"]
                .iter()
                .any(|d| span.starts_with(d));
        let placeholder = span.contains(['<', '*', '$'])
            || span
                .split('/')
                .any(|part| part.len() >= 2 && part.ends_with("N.rs"));
        if !looks_like_path || placeholder {
            continue;
        }
        match (span.find('{'), span.find('}')) {
            (Some(a), Some(b)) if a < b => {
                for alt in span[a + 1..b].split(',') {
                    out.push(format!("{}{alt}{}", &span[..a], &span[b + 1..]));
                }
            }
            _ => out.push(span.to_string()),
        }
    }
    out
}

/// The directory a section heading names (`### \`crates/core\` — …`,
/// `### \`xtask\``): a bare file name under it is that crate's.
fn heading_dir(line: &str) -> Option<String> {
    let span = line.split('`').nth(1)?;
    (span.starts_with("crates/") || span == "xtask").then(|| span.trim_end_matches('/').to_string())
}

#[test]
fn paths_the_docs_name_exist() {
    let root = root();
    let mut docs = vec![
        root.join("README.md"),
        root.join("ARCHITECTURE.md"),
        root.join("benches/README.md"),
    ];
    // Not `docs/decisions/`: a record is history, and names the files of
    // its day.
    for d in std::fs::read_dir(root.join("docs")).unwrap().flatten() {
        if d.path().extension().is_some_and(|e| e == "md") {
            docs.push(d.path());
        }
    }
    for c in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        let readme = c.path().join("README.md");
        if readme.is_file() {
            docs.push(readme);
        }
    }
    let mut dangling = Vec::new();
    let mut checked = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        // Where a path may be written from: the repository's root, the
        // doc's own directory (a crate README: its crate), and under a
        // heading that names a crate, that crate; in each, also its `src/`
        // and `tests/`; and any directory the same section names. Never a
        // suffix of any file: every crate has a `lib.rs`, so a stale
        // `child.rs` would always pass.
        let own = doc.parent().unwrap().to_path_buf();
        let mut section = own.clone();
        for block in text.split("\n#") {
            if let Some(dir) = block.lines().next().and_then(heading_dir) {
                section = root.join(dir);
            }
            let mut bases = Vec::new();
            for base in [&root, &own, &section] {
                for sub in ["", "src", "tests"] {
                    bases.push(base.join(sub));
                }
            }
            // A directory the section names (`stores/`, `linux/seccomp/`)
            // is a base too: "`stores/`: `sqlite.rs`, `seal.rs`".
            let dirs: Vec<_> = block
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|span| !span.contains(char::is_whitespace) && span.contains('/'))
                .flat_map(|span| bases.iter().map(move |b| b.join(span)))
                .filter_map(|p| {
                    if p.is_dir() {
                        Some(p)
                    } else {
                        p.is_file().then(|| p.parent().unwrap().to_path_buf())
                    }
                })
                .collect();
            bases.extend(dirs);
            for path in named_paths(block) {
                checked += 1;
                let exists = bases.iter().any(|b| b.join(&path).exists())
                    || path.ends_with(".toml") && !path.contains('/'); // a file name users write (package.toml)
                if !exists {
                    dangling.push(format!("{}: `{path}`", relative(doc)));
                }
            }
        }
    }
    assert!(checked > 20, "too few paths found in the docs: {checked}");
    assert!(
        dangling.is_empty(),
        "the docs name paths that do not exist (fix the doc or the path):\n{}",
        dangling.join("\n")
    );
}

/// The docs' generated tables (`cargo xtask docs`) match the code.
#[test]
fn generated_tables_match_the_code() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cordon-docs"))
        .arg("--check")
        .output()
        .expect("cordon-docs runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A generated table edited by hand fails the check, naming the table;
/// the generator then writes it back.
#[test]
fn a_generated_table_edited_by_hand_fails_the_check() {
    let docs = env!("CARGO_BIN_EXE_cordon-docs");
    let copy = tempfile::tempdir().unwrap();
    for f in [
        "README.md",
        "benches/README.md",
        "crates/backend-linux/README.md",
        "docs/probes.md",
        "docs/policy-format.md",
    ] {
        let to = copy.path().join(f);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(root().join(f), &to).unwrap();
    }
    let check = || {
        std::process::Command::new(docs)
            .args(["--check", "--root"])
            .arg(copy.path())
            .output()
            .unwrap()
    };
    assert!(check().status.success(), "control: the copy is current");
    let readme = copy.path().join("README.md");
    let text = std::fs::read_to_string(&readme).unwrap();
    let edited = text.replacen(
        "| `open_files` | none | 256 |",
        "| `open_files` | none | 4096 |",
        1,
    );
    assert_ne!(edited, text, "the limits table has the row this test edits");
    std::fs::write(&readme, &edited).unwrap();
    let out = check();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("limits (README.md)"), "{stderr}");
    let wrote = std::process::Command::new(docs)
        .arg("--root")
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(wrote.success());
    assert_eq!(std::fs::read_to_string(&readme).unwrap(), text);
}

/// The places where the host opens, writes, removes, sweeps or chowns a
/// path that a sandbox or another local user could shape. Each must do it
/// through `cordon_core::hostfs` (no link followed, outputs made beside
/// their name, bounded removal), never with a `std::fs` call on a path:
/// the per-place guards it replaced each missed a case.
const HOST_PATH_FILES: &[&str] = &[
    "crates/cli/src/explain.rs",
    "crates/cli/src/run.rs",
    "crates/cli/src/star/mod.rs",
    "crates/core/src/child/scratch.rs",
    "crates/backend-linux/src/linux/wrap.rs",
];

/// Path calls that write, create, remove or change ownership.
const RAW_PATH_WRITES: &[&str] = &[
    "OpenOptions",
    "custom_flags(",
    "fs::File::create",
    "File::options",
    "fs::write(",
    "remove_dir_all",
    "remove_file(",
    "fs::chown(",
    "fs::lchown(",
    "fs::rename(",
    "set_permissions(",
];

#[test]
fn host_paths_go_through_hostfs() {
    let mut problems = Vec::new();
    for rel in HOST_PATH_FILES {
        let text = std::fs::read_to_string(root().join(rel))
            .unwrap_or_else(|e| panic!("{rel}: {e} (listed in HOST_PATH_FILES)"));
        // A unit-test module at the end may make its fixtures freely.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for raw in RAW_PATH_WRITES {
                if line.contains(raw) {
                    problems.push(format!("{rel}:{}: `{raw}`: use cordon_core::hostfs", n + 1));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
