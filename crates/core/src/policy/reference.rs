//! The policy file format, key by key: the one table `cargo xtask docs`
//! renders into `docs/policy-format.md`. Tests hold it to the parser: every
//! key here parses with its example, and every key the parser accepts is
//! here.

/// One key of the policy file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyDoc {
    /// `section.key` (or `key` at the top level).
    pub key: &'static str,
    /// The TOML type.
    pub kind: &'static str,
    /// What it does, and how a later file or flag combines with it.
    pub doc: &'static str,
    /// A value as it would be written.
    pub example: &'static str,
}

/// Every key of the policy file format.
pub const REFERENCE: &[KeyDoc] = &[
    KeyDoc {
        key: "extends",
        kind: "array of strings",
        doc: "Files read before this one, relative to this file's directory (no `${...}`). \
              At most 8 deep; a cycle is an error.",
        example: r#"["base.toml"]"#,
    },
    KeyDoc {
        key: "timeout",
        kind: "seconds (number)",
        doc: "Wall-clock limit; the program and its descendants are killed at it. Later wins.",
        example: "300",
    },
    KeyDoc {
        key: "scratch",
        kind: "string",
        doc: "The program's cwd: `\"fresh\"` (the default: a new dir, discarded), `\"keep\"` \
              (a new dir, kept and printed) or an absolute path of the caller's. Later wins.",
        example: r#""fresh""#,
    },
    KeyDoc {
        key: "tty",
        kind: "boolean",
        doc: "The program gets a terminal of its own, relayed to the caller's (`cordon run -t`; \
              an agent's shell, a REPL). `cordon run` then needs a terminal on stdin. Later \
              wins; `-t` turns it on.",
        example: "true",
    },
    KeyDoc {
        key: "fs.ro",
        kind: "array of paths",
        doc: "Read-only grants. A directory's programs may also be executed (reading a \
              program is enough to run it through its loader anyway). Lists add up.",
        example: r#"["${CWD}"]"#,
    },
    KeyDoc {
        key: "fs.rw",
        kind: "array of paths",
        doc: "Read-write grants (no execute). Lists add up.",
        example: r#"["${CWD}/out"]"#,
    },
    KeyDoc {
        key: "fs.rw_review",
        kind: "array of paths",
        doc: "Directories the program writes through a layer kept apart; after the run the \
              changes are shown and applied, discarded or kept (`cordon run --rw-review`, \
              `--review`). Needs tier namespaces. Lists add up.",
        example: r#"["${CWD}"]"#,
    },
    KeyDoc {
        key: "fs.exec",
        kind: "array of paths",
        doc: "Read and execute: a program file alone, or a directory of programs. Lists add up.",
        example: r#"["/usr/bin/git"]"#,
    },
    KeyDoc {
        key: "fs.mask",
        kind: "array of paths or patterns",
        doc: "Hidden inside the grants: each existing file or directory that matches is \
              covered by an empty one in the sandbox's mount namespace. `*` and `?` match \
              within a name, a `**` component any depth. Matched when the sandbox starts: a \
              file created later is not masked (grant its tree read-only, or mask its \
              directory). A mask must start inside an `ro`, `rw` or `exec` grant; a match that \
              is a symlink masks what it names; a file with several hard links, inside a \
              masked directory too, is refused. A mask hides a path, not its content: \
              copies elsewhere (backups, `.git` objects) stay readable. Needs tier \
              namespaces (tier landlock refuses masks). Lists add up.",
        example: r#"["${HOME}/.ssh", "${CWD}/**/.env"]"#,
    },
    KeyDoc {
        key: "env.pass",
        kind: "array of names",
        doc: "Host variables passed through when set. Lists add up.",
        example: r#"["LANG", "TERM"]"#,
    },
    KeyDoc {
        key: "env.set",
        kind: "table of strings",
        doc: "Variables set. A value may start with `${CORDON_SCRATCH}` (the scratch dir). A \
              later value for the same name wins.",
        example: r#"{ PIP_CACHE_DIR = "${CORDON_SCRATCH}/pip" }"#,
    },
    KeyDoc {
        key: "limits.memory",
        kind: "size (bytes, or \"K\"/\"M\"/\"G\" string)",
        doc: "Memory of the sandbox (`--mem`). Later wins.",
        example: r#""512M""#,
    },
    KeyDoc {
        key: "limits.memory_scope",
        kind: "\"sandbox\" or \"process\"",
        doc: "What `memory` must hold for (default `sandbox` when `memory` is set): where the \
              host cannot hold it so, cordon refuses to run.",
        example: r#""sandbox""#,
    },
    KeyDoc {
        key: "limits.cpu",
        kind: "seconds (number)",
        doc: "CPU time of the sandbox (`--cpu`). Later wins.",
        example: "60",
    },
    KeyDoc {
        key: "limits.cpu_scope",
        kind: "\"sandbox\" or \"process\"",
        doc: "What `cpu` must hold for (as `memory_scope`).",
        example: r#""process""#,
    },
    KeyDoc {
        key: "limits.processes",
        kind: "integer",
        doc: "Processes and threads of the sandbox at once (`--pids`). Later wins.",
        example: "64",
    },
    KeyDoc {
        key: "limits.processes_scope",
        kind: "\"sandbox\" or \"process\"",
        doc: "What `processes` must hold for (as `memory_scope`).",
        example: r#""sandbox""#,
    },
    KeyDoc {
        key: "limits.disk",
        kind: "size",
        doc: "Bytes in a fresh scratch dir (`--disk`). Later wins.",
        example: r#""1G""#,
    },
    KeyDoc {
        key: "limits.disk_scope",
        kind: "\"sandbox\" or \"process\"",
        doc: "What `disk` must hold for (as `memory_scope`; only a fresh, discarded scratch \
              holds it for the sandbox).",
        example: r#""sandbox""#,
    },
    KeyDoc {
        key: "limits.open_files",
        kind: "integer",
        doc: "Open files per process (`--fds`). Later wins.",
        example: "256",
    },
    KeyDoc {
        key: "limits.file_size",
        kind: "size",
        doc: "Largest file the program may write, per file. Later wins.",
        example: r#""64M""#,
    },
    KeyDoc {
        key: "network.allow",
        kind: "array of host patterns",
        doc: "Outgoing TCP to these `[SCHEME://]HOST[:PORT]` only, through cordon's proxy \
              (`--allow-host`); no `allow` anywhere means no network. Lists add up.",
        example: r#"["github.com", "https://*.pypi.org"]"#,
    },
    KeyDoc {
        key: "network.private",
        kind: "array of CIDR ranges",
        doc: "Loopback, private or link-local ranges the allowed names may resolve into \
              (`--allow-private`), named explicitly. Lists add up.",
        example: r#"["10.0.0.0/8"]"#,
    },
    KeyDoc {
        key: "network.rules",
        kind: "array of request rules",
        doc: "`METHODS https://HOST/PATH`: on a host with rules, only the requests a rule \
              allows (`*` one path segment, `**` any); the proxy terminates TLS to check \
              (`--rule`). Lists add up.",
        example: r#"["GET,HEAD https://api.github.com/repos/acme/**"]"#,
    },
    KeyDoc {
        key: "network.upstream_ca",
        kind: "path",
        doc: "A PEM file of CAs the broker trusts for the servers it terminates toward, besides \
              the WebPKI roots (`--upstream-ca`). Later wins.",
        example: r#""/etc/ssl/corp-ca.pem""#,
    },
    KeyDoc {
        key: "secrets.NAME.from",
        kind: "string",
        doc: "Where the value of secret NAME comes from: `env:VAR` (cordon's environment), \
              `file:PATH` or `store:PACKAGE/NAME`; missing or unreadable refuses the run \
              (`--secret NAME=SOURCE`).",
        example: r#""env:GITHUB_TOKEN""#,
    },
    KeyDoc {
        key: "secrets.NAME.hosts",
        kind: "array of host patterns",
        doc: "The exact names (HTTPS) the value may go to; the proxy swaps it in toward these \
              only, and they are allowed (`--secret-host NAME=HOST`).",
        example: r#"["api.github.com"]"#,
    },
    KeyDoc {
        key: "secrets.NAME.header",
        kind: "string",
        doc: "A header the proxy sets on every request to the hosts, `{}` standing for the \
              value; without it the placeholder is swapped where it appears in the headers \
              (`--secret-header NAME=TEMPLATE`).",
        example: r#""Authorization: Bearer {}""#,
    },
    KeyDoc {
        key: "secrets.NAME.env",
        kind: "string",
        doc: "The variable the program finds the placeholder in (default: NAME) \
              (`--secret-env NAME=VAR`).",
        example: r#""GITHUB_TOKEN""#,
    },
];

#[cfg(test)]
mod tests {
    use super::super::file::{from_toml, Expansions};
    use super::*;

    fn vars() -> Expansions {
        Expansions {
            home: Some("/home/u".into()),
            cwd: "/src".into(),
        }
    }

    /// A document holding every key with its example.
    fn full_document() -> String {
        let mut top = String::new();
        let mut sections: std::collections::BTreeMap<&str, String> = Default::default();
        for k in REFERENCE {
            match k.key.split_once('.') {
                Some((s, key)) => {
                    let body = sections.entry(s).or_default();
                    body.push_str(&format!("{key} = {}\n", k.example));
                }
                None if k.key == "extends" => {}
                None => top.push_str(&format!("{} = {}\n", k.key, k.example)),
            }
        }
        for (s, body) in sections {
            top.push_str(&format!("[{s}]\n{body}"));
        }
        top
    }

    #[test]
    fn every_documented_key_parses_with_its_example() {
        let doc = full_document();
        from_toml(&doc, "all.toml".as_ref(), &vars()).unwrap_or_else(|e| panic!("{e}\n{doc}"));
    }

    #[test]
    fn every_key_the_parser_accepts_is_documented() {
        // The parser names the keys it accepts when it refuses one.
        for section in ["", "fs", "env", "limits", "network"] {
            let doc = if section.is_empty() {
                "no_such_key = 1\n".to_string()
            } else {
                format!("[{section}]\nno_such_key = 1\n")
            };
            let e = from_toml(&doc, "x.toml".as_ref(), &vars()).unwrap_err();
            let accepted: Vec<&str> = e.message.split('`').skip(3).step_by(2).collect();
            assert!(!accepted.is_empty(), "{e}");
            for key in accepted {
                let full = if section.is_empty() {
                    key.to_string()
                } else {
                    format!("{section}.{key}")
                };
                let is_section = ["fs", "env", "limits", "network", "secrets"].contains(&key);
                assert!(
                    is_section || REFERENCE.iter().any(|k| k.key == full),
                    "`{full}` is accepted but not in REFERENCE"
                );
            }
        }
    }
}
