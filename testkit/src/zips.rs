//! Zips made for tests, as a project's `get_output` or a volunteer's host
//! sends them.

use std::io::Write;

/// A zip file of `entries` (name, content), deflated, in a temporary file.
pub fn zip_file(entries: &[(&str, &[u8])]) -> tempfile::NamedTempFile {
    let tmp = tempfile::NamedTempFile::new().expect("a temporary file");
    let mut w = zip::ZipWriter::new(tmp.reopen().expect("the temporary file again"));
    for (name, data) in entries {
        w.start_file(*name, zip::write::SimpleFileOptions::default()).expect("a zip entry");
        w.write_all(data).expect("a zip entry's bytes");
    }
    w.finish().expect("the zip's end record");
    tmp
}
