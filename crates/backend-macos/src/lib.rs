//! Placeholder: built in a later issue.
