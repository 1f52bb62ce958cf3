//! Whether a job's `container_image` is an image reference, before it
//! travels to a volunteer's host, where podman reads it
//! (docs/runner.md "Containers"): never an option of podman's, never a
//! path on the host.
//!
//! The grammar is the OCI distribution reference's (what podman and
//! Docker take): `[registry[:port]/]path[:tag][@digest]`, each path
//! component lowercase. The one transport taken is `docker://` (a
//! registry, as a bare name is): the others name the host's files
//! (`dir:`, `oci:`, `oci-archive:`, `docker-archive:`, ...), its
//! Docker daemon or its own image store, none of which a job may choose.

/// What makes `image` not an image reference, if anything.
pub fn problem(image: &str) -> Option<String> {
    if image.starts_with('-') {
        return Some("it begins with '-', which podman would read as an option".into());
    }
    if let Some(c) = image.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!("it has the character {c:?}"));
    }
    let reference = match image.strip_prefix("docker://") {
        Some(reference) => reference,
        None => match image.split_once(':').filter(|(t, _)| TRANSPORTS.contains(t)) {
            Some((transport, _)) => {
                return Some(format!("it names the transport {transport}:, and only docker:// or a bare name is taken"))
            }
            None => image,
        },
    };
    if reference.contains("://") {
        return Some("only the transport docker:// is taken".into());
    }
    if reference.len() > MAX_NAME {
        return Some(format!("it is longer than {MAX_NAME} characters"));
    }
    let (rest, digest) = match reference.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (reference, None),
    };
    if let Some(digest) = digest {
        if !is_digest(digest) {
            return Some(format!("its digest {digest} is not algorithm:hex"));
        }
    }
    // A tag is after the last ':' that follows the last '/' (a ':'
    // before that is the registry's port).
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        if !is_tag(tag) {
            return Some(format!("its tag {tag:?} is not 1-128 of letters, digits, '_', '.' and '-' (not first)"));
        }
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    let first = parts[0];
    if parts.len() > 1 && (first.contains('.') || first.contains(':') || first == "localhost") {
        if !is_registry(first) {
            return Some(format!("its registry {first:?} is not host[:port]"));
        }
        parts.remove(0);
    }
    let bad = parts.iter().find(|p| !is_path_component(p));
    bad.map(|p| format!("its path component {p:?} is not lowercase letters and digits, joined by '.', '_', '__' or '-'"))
}

/// The transports of containers/image that are not a registry.
const TRANSPORTS: [&str; 10] =
    ["containers-storage", "dir", "docker", "docker-archive", "docker-daemon", "oci", "oci-archive", "ostree", "sif", "tarball"];

/// The reference grammar's limit on a name.
const MAX_NAME: usize = 255;

fn is_path_component(p: &str) -> bool {
    let b = p.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.is_empty() || !alnum(&b[0]) || !alnum(&b[b.len() - 1]) {
        return false;
    }
    // Separators between alphanumeric runs: '.', '_', '__' or any run of '-'.
    let mut i = 0;
    while i < b.len() {
        if alnum(&b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(&b[i]) {
            i += 1;
        }
        let sep = &p[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-')) {
            return false;
        }
    }
    true
}

fn is_registry(r: &str) -> bool {
    let (host, port) = match r.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (r, None),
    };
    let label =
        |l: &str| !l.is_empty() && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-') && !l.starts_with('-') && !l.ends_with('-');
    host.split('.').all(label) && port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|c| c.is_ascii_digit()))
}

fn is_tag(t: &str) -> bool {
    let ok = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-';
    (1..=128).contains(&t.len()) && t.bytes().all(ok) && !t.starts_with(['.', '-'])
}

fn is_digest(d: &str) -> bool {
    let Some((algorithm, hex)) = d.split_once(':') else { return false };
    let algorithm_ok = algorithm
        .split(['+', '.', '_', '-'])
        .all(|c| c.starts_with(|c: char| c.is_ascii_alphabetic()) && c.bytes().all(|c| c.is_ascii_alphanumeric()));
    algorithm_ok && hex.len() >= 32 && hex.bytes().all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::problem;

    #[test]
    fn image_references_are_taken() {
        for image in [
            "python",
            "python:3.12",
            "docker://python:3.12",
            "localhost/boinc-gahp-test:1",
            "localhost:5000/a/b:latest",
            "registry.example.org/osg/el9_python:v1.2-rc_3",
            "quay.io/a__b/c-d.e---f:x",
            "ghcr.io/org/img@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "img:tag@sha256:0123456789abcdef0123456789abcdef",
            "Registry.Example.org/x",
            "docker://oci:x",
        ] {
            assert_eq!(problem(image), None, "{image}");
        }
    }

    #[test]
    fn anything_else_is_refused_saying_why() {
        for (image, why) in [
            ("-v/:/host", "begins with '-'"),
            ("--privileged", "begins with '-'"),
            ("python 3", "the character ' '"),
            ("python\t3", "the character '\\t'"),
            ("py\u{1b}[31m", "the character '\\u{1b}'"),
            ("oci-archive:/etc/shadow", "the transport oci-archive:"),
            ("dir:/", "the transport dir:"),
            ("oci:layout", "the transport oci:"),
            ("containers-storage:python", "the transport containers-storage:"),
            ("docker-daemon:python:3", "the transport docker-daemon:"),
            ("http://example.org/img", "only the transport docker://"),
            ("Python:3", "path component \"Python\""),
            ("a//b", "path component \"\""),
            ("a/-b", "path component \"-b\""),
            ("a/b.", "path component \"b.\""),
            ("a/b..c", "path component \"b..c\""),
            ("a/b___c", "path component \"b___c\""),
            ("../etc", "its registry \"..\""),
            ("/etc/img", "path component \"\""),
            ("python:", "its tag \"\""),
            ("python:-x", "its tag \"-x\""),
            ("localhost:99999999/x", "its registry"),
            ("exa_mple.org/x", "its registry"),
            ("img@sha256:abc", "its digest"),
            ("img@:0123456789abcdef0123456789abcdef", "its digest"),
        ] {
            let got = problem(image).unwrap_or_else(|| panic!("{image:?} was taken"));
            assert!(got.contains(why), "{image:?}: {got}");
        }
        assert!(problem(&format!("a/{}", "b".repeat(300))).unwrap().contains("longer than 255"));
    }
}
