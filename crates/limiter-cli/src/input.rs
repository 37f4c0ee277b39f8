//! Opening a trace: a file path, or `-` for standard input.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use crate::failure::Failure;

/// Opens `path` for buffered reading; `-` is standard input.
pub(crate) fn open_trace(path: &Path) -> Result<Box<dyn BufRead>, Failure> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(BufReader::with_capacity(1 << 16, io::stdin())));
    }
    let file = File::open(path).map_err(|e| {
        Failure::runtime(format!("cannot open trace {}", path.display())).with_source(e)
    })?;
    Ok(Box::new(BufReader::with_capacity(1 << 16, file)))
}

/// How a trace is named in messages: its path, or `<stdin>`.
pub(crate) fn trace_name(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "<stdin>".to_owned()
    } else {
        path.display().to_string()
    }
}
