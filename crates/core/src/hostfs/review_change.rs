//! What one name of a review layer does to the host's directory.

#[allow(unused_imports)]
use super::*;

/// What one name of a layer does to the host's directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ChangeKind {
    /// A new file, link or directory.
    Added {
        /// A file's size (0 for a directory).
        bytes: u64,
    },
    /// A file or link written over one that was there.
    Modified {
        /// Its new size.
        bytes: u64,
    },
    /// A name deleted (a whole tree, for a directory).
    Deleted,
    /// A directory deleted and made again: the host's is replaced whole.
    Replaced,
    /// Not applied: what it is and why.
    Refused {
        /// What the entry is and why it is not applied.
        reason: String,
    },
    /// Not applied: the host's entry changed since the run started.
    Conflict,
}

/// One change of a layer, by its path inside the directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The path, relative to the directory.
    pub path: PathBuf,
    /// What it does.
    #[serde(flatten)]
    pub kind: ChangeKind,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.path.display();
        match &self.kind {
            ChangeKind::Added { bytes } => write!(f, "A {p} ({bytes} bytes)"),
            ChangeKind::Modified { bytes } => write!(f, "M {p} ({bytes} bytes)"),
            ChangeKind::Deleted => write!(f, "D {p}"),
            ChangeKind::Replaced => write!(f, "R {p} (directory replaced)"),
            ChangeKind::Refused { reason } => write!(f, "! {p}: refused: {reason}"),
            ChangeKind::Conflict => write!(
                f,
                "C {p}: conflict: changed on the host since the run started; not applied"
            ),
        }
    }
}
