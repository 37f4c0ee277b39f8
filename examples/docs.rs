//! The Rust code of the README and of every page of docs/: each page is the
//! documentation of an item below, so `cargo test --doc` compiles every
//! `rust` block of it as a doc test, and runs it unless it is `no_run` (a
//! block that needs a server). What is not Rust is fenced with its language
//! (`text`, `sh`, `toml`, `json`), which rustdoc leaves alone.

/// Declares one item per page, documented by the page, and the list of
/// pages the test below compares with what is on disk.
macro_rules! pages {
    ($($item:ident: $path:literal,)*) => {
        $(
            #[cfg(doctest)]
            #[doc = include_str!($path)]
            pub struct $item;
        )*
        /// The pages whose Rust blocks are doc tests, relative to this file.
        #[cfg(test)]
        const PAGES: &[&str] = &[$($path),*];
    };
}

pages! {
    Readme: "../README.md",
    Contributing: "../CONTRIBUTING.md",
    Algorithms: "../docs/algorithms.md",
    AxumRedis: "../docs/axum-redis.md",
    Backends: "../docs/backends.md",
    Benchmarks: "../docs/benchmarks.md",
    Cli: "../docs/cli.md",
    Fuzzing: "../docs/fuzzing.md",
    Http: "../docs/http.md",
    Lease: "../docs/lease.md",
    Spec: "../docs/spec.md",
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// A page added to docs/ without a line above would have Rust blocks
    /// that nothing compiles.
    #[test]
    fn every_page_of_docs_is_a_doc_test() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
        let mut missing = Vec::new();
        for entry in std::fs::read_dir(&docs).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".md") && !super::PAGES.contains(&format!("../docs/{name}").as_str())
            {
                missing.push(name);
            }
        }
        assert!(
            missing.is_empty(),
            "docs/ pages not in examples/docs.rs: {missing:?}"
        );
    }
}
