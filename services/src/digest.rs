//! Digests as names: the lowercase hex MD5 that BOINC names files by, and
//! that the BLAH front end names batches, directories and URLs' files by.
//! Pure: the FileStager hashes files' content itself, in a pool of threads.

use md5::{Digest, Md5};

/// Lowercase hex MD5 of some bytes.
pub fn hex_md5(bytes: &[u8]) -> String {
    Md5::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn it_is_the_md5_boinc_names_files_by() {
        assert_eq!(super::hex_md5(b""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(super::hex_md5(b"abc"), "900150983cd24fb0d6963f7d28e17f72");
    }
}
