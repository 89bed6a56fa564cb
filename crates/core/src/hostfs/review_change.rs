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
    /// A symbolic link's target, when the entry is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<OsString>,
}

impl std::fmt::Display for Change {
    /// One line; names and targets escaped (`crate::explain::escape_bytes`),
    /// so a name the program chose cannot forge or hide a line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = crate::explain::escape_bytes(self.path.as_os_str().as_bytes());
        let link = self
            .link
            .as_ref()
            .map(|t| format!(" -> {}", crate::explain::escape_bytes(t.as_bytes())))
            .unwrap_or_default();
        match &self.kind {
            ChangeKind::Added { bytes } => write!(f, "A {p}{link} ({bytes} bytes)"),
            ChangeKind::Modified { bytes } => write!(f, "M {p}{link} ({bytes} bytes)"),
            ChangeKind::Deleted => write!(f, "D {p}"),
            ChangeKind::Replaced => write!(f, "R {p} (directory replaced)"),
            ChangeKind::Refused { reason } => write!(
                f,
                "! {p}{link}: refused: {}",
                crate::explain::escape(reason)
            ),
            ChangeKind::Conflict => write!(
                f,
                "C {p}: conflict: changed on the host since the run started (or holds a mount \
                 point); not applied"
            ),
        }
    }
}
