//! Everyday jobs under `cordon run` with the default view plus only the
//! grants and hosts each job needs: `make` + `gcc`, `pip install` from a
//! package index, `npm install` from a registry, `cargo build` of a crate
//! with a dependency from its registry, `git clone` over HTTPS. (Go is
//! not installed here.) The index, the registries and the git host are
//! local servers on
//! 127.0.0.1 standing in for the real ones, so nothing depends on an
//! outside host. As root and as uid 65534; the jobs that need the network
//! run in tier namespaces only (tier landlock cannot hold an allowlist),
//! `make` in both tiers.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::http::{git_repo, HostServer};
use crate::common::https::HttpsServer;
use crate::common::{cordon, run, shared_cache, text, unprivileged};

#[derive(Debug, Clone, Copy)]
struct Way {
    unprivileged: bool,
    landlock: bool,
}

const NAMESPACES: [Way; 2] = [
    Way {
        unprivileged: false,
        landlock: false,
    },
    Way {
        unprivileged: true,
        landlock: false,
    },
];

const EVERY: [Way; 4] = [
    NAMESPACES[0],
    NAMESPACES[1],
    Way {
        unprivileged: false,
        landlock: true,
    },
    Way {
        unprivileged: true,
        landlock: true,
    },
];

/// `cordon run [--tier landlock] <flags> -- sh -c SCRIPT` for `way`.
fn job(way: Way, dir: &Path, flags: &[&str], script: &str) -> Command {
    let mut cmd = if way.unprivileged {
        unprivileged(&dir.join("as-65534"))
    } else {
        cordon(shared_cache().path())
    };
    cmd.arg("run");
    if way.landlock {
        cmd.args(["--tier", "landlock"]);
    }
    cmd.args(flags).args(["--", "/bin/sh", "-c", script]);
    cmd
}

/// A directory every uid may read.
fn public_dir(path: PathBuf) -> PathBuf {
    std::fs::create_dir_all(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn check(way: Way, cmd: &mut Command, expect: &str) {
    let out = run(cmd);
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success() && o.contains(expect),
        "{way:?}: {}\nstdout: {o}\nstderr: {e}",
        out.status
    );
}

#[test]
fn make_and_gcc_build_a_program() {
    let tmp = tempfile::tempdir().unwrap();
    let src = public_dir(tmp.path().join("src"));
    std::fs::write(
        src.join("Makefile"),
        "hello: hello.c\n\tgcc -O2 -o hello hello.c\n",
    )
    .unwrap();
    std::fs::write(
        src.join("hello.c"),
        "#include <stdio.h>\nint main(void){puts(\"BUILT-AND-RAN\");return 0;}\n",
    )
    .unwrap();
    for f in ["Makefile", "hello.c"] {
        std::fs::set_permissions(src.join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let s = src.to_str().unwrap();
    for way in EVERY {
        // In tier landlock a sandbox of the caller's own uid may not chmod
        // (it could change the caller's files under a read grant), so the
        // linker's last step (it creates the output 0666, then adds the
        // execute bits) is refused: the program is built, and run through
        // its loader (README: tier landlock).
        let start = if way.landlock && way.unprivileged {
            "/lib64/ld-linux-x86-64.so.2 ./hello"
        } else {
            "./hello"
        };
        let script = format!("cp {s}/Makefile {s}/hello.c . && make -s && {start}");
        check(
            way,
            &mut job(way, tmp.path(), &["--ro", s], &script),
            "BUILT-AND-RAN",
        );
    }
}

/// A package index (PEP 503) and an npm registry under `www`, served on
/// 127.0.0.1: a wheel `demo` 1.0 and an npm package `demo` 1.0.0.
fn registries(www: &Path) -> HostServer {
    let server = HostServer::start(www.to_path_buf());
    let port = server.port;
    let py = format!(
        r#"
import zipfile, hashlib, base64, json, os, tarfile, io
www = {www:?}
os.makedirs(www + '/simple/demo', exist_ok=True)
files = {{'demo/__init__.py': b'VALUE = 42\n',
         'demo-1.0.dist-info/METADATA': b'Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n',
         'demo-1.0.dist-info/WHEEL': b'Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n'}}
rec = []
for n, b in files.items():
    h = base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()
    rec.append(f'{{n}},sha256={{h}},{{len(b)}}')
rec.append('demo-1.0.dist-info/RECORD,,')
files['demo-1.0.dist-info/RECORD'] = ('\n'.join(rec) + '\n').encode()
with zipfile.ZipFile(www + '/simple/demo/demo-1.0-py3-none-any.whl', 'w') as z:
    for n, b in files.items():
        z.writestr(n, b)
open(www + '/simple/demo/index.html', 'w').write('<a href="demo-1.0-py3-none-any.whl">demo-1.0-py3-none-any.whl</a>')
os.makedirs(www + '/tarballs', exist_ok=True)
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode='w:gz') as t:
    for name, body in [('package/package.json', b'{{"name":"demo","version":"1.0.0","main":"index.js"}}'),
                       ('package/index.js', b'module.exports = "NPM-DEMO-" + (40 + 2);\n')]:
        info = tarfile.TarInfo(name); info.size = len(body); info.mode = 0o644
        t.addfile(info, io.BytesIO(body))
tgz = buf.getvalue()
open(www + '/tarballs/demo-1.0.0.tgz', 'wb').write(tgz)
doc = {{'name': 'demo', 'dist-tags': {{'latest': '1.0.0'}}, 'versions': {{'1.0.0': {{'name': 'demo', 'version': '1.0.0', 'main': 'index.js',
       'dist': {{'tarball': 'http://localhost:{port}/tarballs/demo-1.0.0.tgz', 'shasum': hashlib.sha1(tgz).hexdigest(),
                'integrity': 'sha512-' + base64.b64encode(hashlib.sha512(tgz).digest()).decode()}}}}}}}}
open(www + '/demo', 'w').write(json.dumps(doc))
"#
    );
    let out = Command::new("/usr/bin/python3")
        .args(["-c", &py])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "making the registries: {}",
        text(&out.stderr)
    );
    server
}

#[test]
fn pip_and_npm_install_from_their_registries_through_the_allowlist() {
    let tmp = tempfile::tempdir().unwrap();
    let www = public_dir(tmp.path().join("www"));
    let server = registries(&www);
    let port = server.port;
    let host = format!("localhost:{port}");
    for way in NAMESPACES {
        let pip = format!(
            "/usr/bin/python3 -m pip install -q --target ./t --index-url http://{host}/simple/ \
             --trusted-host localhost demo && /usr/bin/python3 -c 'import sys; \
             sys.path.insert(0, \"t\"); import demo; print(\"PIP-DEMO-%d\" % demo.VALUE)'"
        );
        check(
            way,
            &mut job(way, tmp.path(), &["--allow-host", &host], &pip),
            "PIP-DEMO-42",
        );
        let npm = format!(
            "echo '{{\"name\":\"x\",\"version\":\"1.0.0\"}}' > package.json && \
             npm install --no-audit --no-fund --registry http://{host}/ demo >/dev/null && \
             node -e 'console.log(require(\"demo\"))'"
        );
        check(
            way,
            &mut job(way, tmp.path(), &["--allow-host", &host], &npm),
            "NPM-DEMO-42",
        );
    }
    let fetched = server.requests();
    assert!(
        fetched
            .iter()
            .any(|r| r.contains("demo-1.0-py3-none-any.whl")),
        "{fetched:?}"
    );
    assert!(
        fetched.iter().any(|r| r.contains("demo-1.0.0.tgz")),
        "{fetched:?}"
    );
}

#[test]
fn git_clones_over_https_through_the_allowlist() {
    let tmp = tempfile::tempdir().unwrap();
    let root = public_dir(tmp.path().join("git"));
    git_repo(&root);
    let certs = public_dir(tmp.path().join("certs"));
    let server = HttpsServer::start(root, &certs, "");
    let host = format!("localhost:{}", server.port);
    let ca = server.ca.to_str().unwrap().to_owned();
    for way in NAMESPACES {
        let script =
            format!("GIT_SSL_CAINFO={ca} git clone -q https://{host}/repo.git r && cat r/file.txt");
        let c = certs.to_str().unwrap();
        check(
            way,
            &mut job(
                way,
                tmp.path(),
                &["--allow-host", &host, "--ro", c],
                &script,
            ),
            "cloned through the proxy",
        );
    }
}

/// A cargo registry under `www` (a git index over git's dumb HTTP
/// protocol, and its `.crate` files) holding `demo` 1.0.0, for the server
/// on `port`; and a project depending on it, pointed at it by its
/// `.cargo/config.toml` (source replacement: nothing reaches crates.io).
fn cargo_registry(www: &Path, app: &Path, port: u16) {
    let py = format!(
        r#"
import hashlib, io, json, os, tarfile
www, app, port = {www:?}, {app:?}, {port}
os.makedirs(www + '/crates', exist_ok=True)
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode='w:gz') as t:
    for name, body in [('demo-1.0.0/Cargo.toml', b'[package]\nname = "demo"\nversion = "1.0.0"\nedition = "2018"\n'),
                       ('demo-1.0.0/src/lib.rs', b'pub fn value() -> u32 {{ 40 + 2 }}\n')]:
        info = tarfile.TarInfo(name); info.size = len(body); info.mode = 0o644
        t.addfile(info, io.BytesIO(body))
crate = buf.getvalue()
open(www + '/crates/demo-1.0.0.crate', 'wb').write(crate)
idx = www + '/index-src'
os.makedirs(idx + '/de/mo', exist_ok=True)
json.dump({{'dl': f'http://localhost:{{port}}/crates/{{{{crate}}}}-{{{{version}}}}.crate'}}, open(idx + '/config.json', 'w'))
entry = {{'name': 'demo', 'vers': '1.0.0', 'deps': [], 'cksum': hashlib.sha256(crate).hexdigest(), 'features': {{}}, 'yanked': False}}
open(idx + '/de/mo/demo', 'w').write(json.dumps(entry) + '\n')
os.makedirs(app + '/src', exist_ok=True)
os.makedirs(app + '/.cargo', exist_ok=True)
open(app + '/Cargo.toml', 'w').write('[package]\nname = "app"\nversion = "0.1.0"\nedition = "2018"\n\n[dependencies]\ndemo = "1.0"\n')
open(app + '/src/main.rs', 'w').write('fn main() {{ println!("CARGO-DEMO-{{}}", demo::value()); }}\n')
open(app + '/.cargo/config.toml', 'w').write(f'[source.crates-io]\nreplace-with = "local"\n\n[source.local]\nregistry = "http://localhost:{{port}}/index.git"\n\n[net]\ngit-fetch-with-cli = true\n')
for d, _, fs in os.walk(app):
    os.chmod(d, 0o755)
    for f in fs:
        os.chmod(os.path.join(d, f), 0o644)
"#
    );
    let out = Command::new("/usr/bin/python3")
        .args(["-c", &py])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "making the registry: {}",
        text(&out.stderr)
    );
    let git = |args: &[&str], dir: &Path| {
        let out = Command::new("/usr/bin/git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    };
    let src = www.join("index-src");
    git(&["init", "-q"], &src);
    git(&["add", "-A"], &src);
    git(&["commit", "-q", "-m", "index"], &src);
    git(&["clone", "-q", "--bare", "index-src", "index.git"], www);
    git(&["update-server-info"], &www.join("index.git"));
}

#[test]
fn cargo_builds_a_crate_from_its_registry_through_the_allowlist() {
    let tmp = tempfile::tempdir().unwrap();
    let www = public_dir(tmp.path().join("www"));
    let server = HostServer::start(www.clone());
    let app = public_dir(tmp.path().join("app"));
    cargo_registry(&www, &app, server.port);
    let host = format!("localhost:{}", server.port);
    let a = app.to_str().unwrap();
    for way in NAMESPACES {
        // Debian's cargo (/usr/bin), which every uid may run; its home and
        // the index's clone are in the sandbox's scratch.
        let script = format!("cp -r {a}/. . && /usr/bin/cargo build -q && ./target/debug/app");
        check(
            way,
            &mut job(
                way,
                tmp.path(),
                &["--allow-host", &host, "--ro", a],
                &script,
            ),
            "CARGO-DEMO-42",
        );
    }
    let fetched = server.requests();
    assert!(
        fetched.iter().any(|r| r.contains("demo-1.0.0.crate")),
        "{fetched:?}"
    );
}
