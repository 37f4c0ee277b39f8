//! The trace reader (docs/spec.md section 6) on any bytes: no panic, every
//! error names its line, and every request read writes a decisions row whose
//! first three fields read back as the same request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use limiter_core::trace::{decision_row, TraceError, TraceReader, TraceRequest};

fuzz_target!(|data: &[u8]| {
    for result in TraceReader::new(data) {
        match result {
            Ok(request) => {
                assert!(!request.key.trim().is_empty());
                let row = decision_row(&request, None);
                let fields = row.strip_suffix(",error,,,,,").expect("an error row");
                let trace = format!("t_us,key,cost\n{fields}\n");
                let back: Vec<TraceRequest> = TraceReader::new(trace.as_bytes())
                    .map(|r| r.expect("a written row reads back"))
                    .collect();
                assert_eq!(back, [request]);
            }
            Err(TraceError::Io(e)) => panic!("reading a slice failed: {e}"),
            Err(e) => {
                let message = e.to_string();
                assert!(message.starts_with("line "), "{message}");
            }
        }
    }
});
