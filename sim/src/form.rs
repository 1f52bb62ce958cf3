//! The POST form as PHP hands it to a script: a leaf shared by the HTTP
//! layer that fills it and the RPC handlers that read it.

use bytes::Bytes;

/// One uploaded file part.
#[derive(Debug, Clone)]
pub struct FilePart {
    pub field: String,
    pub filename: String,
    pub data: Bytes,
    /// Over `upload_max_filesize`: PHP's `UPLOAD_ERR_INI_SIZE`, no data.
    pub too_big: bool,
}

impl FilePart {
    /// A part with an empty `filename` (a form's file input left empty):
    /// PHP's `UPLOAD_ERR_NO_FILE`, no temp file.
    pub fn no_file(&self) -> bool {
        self.filename.is_empty()
    }
}

/// The POST form as PHP sees it.
#[derive(Debug, Default)]
pub struct Form {
    /// `$_POST['request']`.
    pub request: Option<Vec<u8>>,
    /// `$_FILES`, in order: parts with a `filename`, at most
    /// `max_file_uploads` of them (later ones dropped, as PHP does), a
    /// repeated field name replacing the earlier part.
    pub files: Vec<FilePart>,
    /// The body's length when it was over `post_max_size`: PHP dropped it
    /// whole (no request, no files) and warned.
    pub dropped: Option<u64>,
}
