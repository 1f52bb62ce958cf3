//! The binaries are linked with a GNU build id whatever the linker: the
//! packages' debug info is found by it (/usr/lib/debug/.build-id/), and
//! zig's linker (the portable build of deploy/package/build) writes none
//! unless asked. The system linkers write a sha1 one by default anyway.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-arg-bins=-Wl,--build-id=sha1");
}
