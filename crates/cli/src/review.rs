//! `cordon run --rw-review DIR` and `cordon review`: writes that land in a
//! layer the host keeps apart, shown after the run and then applied,
//! discarded or kept (`cordon_core::hostfs::review` does the reading and
//! writing; this is the command line around it).

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};
use cordon_core::hostfs::review::{self, Change, ChangeKind, ReviewLayer, ReviewStore};
use cordon_core::ReviewedDir;

/// What happens to a review layer when the program has ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReviewAction {
    /// Apply the legitimate changes to the directory (refused ones and
    /// conflicts are listed and kept in the layer).
    Apply,
    /// Drop the layer: the directory stays as it was.
    Discard,
    /// Leave the layer for a later `cordon review apply|discard ID`.
    Keep,
}

/// `cordon review`.
#[derive(Subcommand)]
pub enum ReviewCommand {
    /// The layers kept, with their directory and number of changes.
    List,
    /// What a layer changes.
    Show {
        /// The layer's id (`cordon review list`).
        id: String,
    },
    /// Apply a layer's legitimate changes to its directory.
    Apply {
        /// The layer's id.
        id: String,
    },
    /// Drop a layer; its directory stays as it was.
    Discard {
        /// The layer's id.
        id: String,
    },
}

/// Where this user's review layers live: for root `/var/lib/cordon/reviews`
/// (passable: the sandbox's leased uid must reach the upper dir it is
/// given), else `$XDG_STATE_HOME/cordon/reviews` or
/// `$HOME/.local/state/cordon/reviews`.
pub fn store() -> Result<ReviewStore, String> {
    let (path, root) = store_path()?;
    ReviewStore::open(&path, root).map_err(|e| {
        format!(
            "cannot use the review store {}: {e} (set XDG_STATE_HOME to a private dir of yours)",
            path.display()
        )
    })
}

/// Where [`store`] is (made or not), and whether it is root's passable one.
pub fn store_path() -> Result<(PathBuf, bool), String> {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let path = if root {
        PathBuf::from("/var/lib/cordon/reviews")
    } else {
        let state = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
            .ok_or("no XDG_STATE_HOME or HOME to keep review layers under: set XDG_STATE_HOME")?;
        state.join("cordon/reviews")
    };
    Ok((path, root))
}

/// A layer of this run, held (its lock) until it is dealt with.
pub struct Held {
    layer: ReviewLayer,
    _lock: std::os::fd::OwnedFd,
}

/// Layers made for a run that has not started: discarded when dropped,
/// unless [`started`](Unstarted::started) hands them over.
pub struct Unstarted(Vec<Held>);

impl Unstarted {
    /// The program runs: the layers are now the run's to review.
    pub fn started(mut self) -> Vec<Held> {
        std::mem::take(&mut self.0)
    }
}

impl Drop for Unstarted {
    fn drop(&mut self) {
        for h in &self.0 {
            let _ = review::discard(&h.layer);
        }
    }
}

/// Makes a layer for each `--rw-review` dir.
pub fn prepare(
    store: &ReviewStore,
    dirs: &[PathBuf],
) -> Result<(Unstarted, Vec<ReviewedDir>), String> {
    let mut layers = Unstarted(Vec::new());
    for d in dirs {
        let dir = d
            .canonicalize()
            .map_err(|e| format!("--rw-review {}: {e}", d.display()))?;
        if !dir.is_dir() {
            return Err(format!("--rw-review {}: not a directory", d.display()));
        }
        if dir.starts_with(store.path()) || store.path().starts_with(&dir) {
            return Err(format!(
                "--rw-review {}: the review store {} is inside it or it inside the store",
                d.display(),
                store.path().display()
            ));
        }
        let layer = store
            .create(&dir)
            .map_err(|e| format!("cannot make a review layer for {}: {e}", dir.display()))?;
        let lock = layer
            .lock()
            .map_err(|e| format!("cannot hold review layer {}: {e}", layer.id))?;
        layers.0.push(Held { layer, _lock: lock });
    }
    let reviewed = layers
        .0
        .iter()
        .map(|h| &h.layer)
        .map(|l| ReviewedDir {
            dir: l.record.dir.clone(),
            upper: l.upper(),
            work: l.work(),
        })
        .collect();
    Ok((layers, reviewed))
}

fn print_changes(changes: &[Change]) {
    if changes.is_empty() {
        eprintln!("  (no changes)");
    }
    for c in changes {
        eprintln!("  {c}");
    }
}

/// True when something of the layer was not applied.
fn held_back(changes: &[Change]) -> bool {
    changes
        .iter()
        .any(|c| matches!(c.kind, ChangeKind::Refused { .. } | ChangeKind::Conflict))
}

/// After the run: shows each layer's changes and does `action` (asked on
/// a terminal when `None`, else kept). Returns false when something
/// failed or was held back.
pub fn finish(layers: &[Held], action: Option<ReviewAction>) -> bool {
    let mut ok = true;
    for layer in layers.iter().map(|h| &h.layer) {
        if let Err(e) = layer.seal() {
            eprintln!(
                "cordon: cannot close layer {} to the sandbox's uid: {e}",
                layer.id
            );
            ok = false;
            continue;
        }
        eprintln!(
            "cordon: review of {} (layer {}):",
            layer.record.dir.display(),
            layer.id
        );
        let changes = match review::changes(layer) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("cordon: cannot read the layer: {e}; it is kept");
                ok = false;
                continue;
            }
        };
        print_changes(&changes);
        let action = if changes.is_empty() {
            ReviewAction::Discard
        } else {
            action.unwrap_or_else(ask)
        };
        ok &= act(layer, action);
    }
    ok
}

/// Asks on the terminal; anything but `a` or `d` keeps the layer.
fn ask() -> ReviewAction {
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return ReviewAction::Keep;
    }
    eprint!("cordon: apply, discard or keep these changes? [a/d/K] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    match line.trim() {
        "a" | "apply" => ReviewAction::Apply,
        "d" | "discard" => ReviewAction::Discard,
        _ => ReviewAction::Keep,
    }
}

fn act(layer: &ReviewLayer, action: ReviewAction) -> bool {
    match action {
        ReviewAction::Keep => {
            eprintln!(
                "cordon: kept: `cordon review apply {id}` or `cordon review discard {id}`",
                id = layer.id
            );
            true
        }
        ReviewAction::Discard => match review::discard(layer) {
            Ok(()) => {
                eprintln!(
                    "cordon: discarded; {} is unchanged",
                    layer.record.dir.display()
                );
                true
            }
            Err(e) => {
                eprintln!("cordon: cannot discard layer {}: {e}", layer.id);
                false
            }
        },
        ReviewAction::Apply => match review::apply(layer) {
            Ok(done) if held_back(&done) => {
                eprintln!(
                    "cordon: applied all but what is marked ! (refused) or C (conflict) above; \
                     the layer is kept: `cordon review show {id}`, then `cordon review discard \
                     {id}`",
                    id = layer.id
                );
                false
            }
            Ok(_) => {
                let _ = review::discard(layer);
                eprintln!("cordon: applied to {}", layer.record.dir.display());
                true
            }
            Err(e) => {
                eprintln!(
                    "cordon: applying layer {} stopped: {e}; what was applied stays, the layer \
                     is kept",
                    layer.id
                );
                false
            }
        },
    }
}

/// `cordon review …`.
pub fn main(cmd: ReviewCommand) -> ExitCode {
    let store = match store() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cordon: {e}");
            return ExitCode::from(crate::EXIT_CORDON_FAILED);
        }
    };
    // Each layer is held while it is looked at or dealt with: one still
    // in its run is refused.
    let get = |id: &str| {
        let l = store
            .get(id)
            .map_err(|e| eprintln!("cordon: no review layer `{id}`: {e}"))?;
        let lock = l.lock().map_err(|e| eprintln!("cordon: {e}"))?;
        Ok::<_, ()>((l, lock))
    };
    let ok = match cmd {
        ReviewCommand::List => match store.list() {
            Ok(layers) => {
                for l in layers {
                    let n = match l.lock() {
                        Ok(_held) => review::changes(&l)
                            .map(|c| format!("{} changes", c.len()))
                            .unwrap_or_else(|e| format!("unreadable: {e}")),
                        Err(_) => "in use by a running cordon".into(),
                    };
                    println!("{}  {}  {n}", l.id, l.record.dir.display());
                }
                true
            }
            Err(e) => {
                eprintln!("cordon: cannot list {}: {e}", store.path().display());
                false
            }
        },
        ReviewCommand::Show { id } => match get(&id) {
            Ok((l, _held)) => match review::changes(&l) {
                Ok(c) => {
                    println!("{}:", l.record.dir.display());
                    for c in c {
                        println!("  {c}");
                    }
                    true
                }
                Err(e) => {
                    eprintln!("cordon: cannot read layer {id}: {e}");
                    false
                }
            },
            Err(()) => false,
        },
        ReviewCommand::Apply { id } => {
            get(&id).is_ok_and(|(l, _held)| act(&l, ReviewAction::Apply))
        }
        ReviewCommand::Discard { id } => {
            get(&id).is_ok_and(|(l, _held)| act(&l, ReviewAction::Discard))
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
