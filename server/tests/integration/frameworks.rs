//! LangChain's `QdrantVectorStore` and LlamaIndex's `QdrantVectorStore`, unmodified (pinned
//! from PyPI in a virtualenv of their own), used as their documentation shows against Cairn,
//! on 2,000 real sentence embeddings of `pypi-minilm` (`tests/frameworks/check.py`).

use std::path::PathBuf;
use std::process::Command;

use cairn_index::dataset::shared_data_dir;

use crate::harness::Server;

/// Pinned so a new release cannot change what these tests mean.
const PACKAGES: &[&str] = &[
    "qdrant-client==1.20.0",
    "langchain-qdrant==1.1.0",
    "langchain-core==1.8.3",
    "llama-index-vector-stores-qdrant==0.10.4",
    "llama-index-core==0.14.25",
];

fn run(framework: &str) {
    let python = crate::harness::venv("frameworks-venv", PACKAGES);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/frameworks/check.py");
    let output = Command::new(python)
        .arg(script)
        .args([framework, &server.url("")])
        .arg(shared_data_dir().join("pypi-minilm"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stdout}");
    assert!(
        output.status.success(),
        "{framework} check failed:\n{stdout}\n{stderr}\nserver log:\n{}",
        server.log()
    );
    assert!(
        stdout.contains(&format!("{framework} check passed")),
        "{stdout}"
    );
}

/// `from_texts` (LangChain's `{"": …}` collection), similarity search with scores and with a
/// metadata filter, documents by id, deletes, and opening the existing collection.
#[test]
fn langchain_qdrant_vector_store_works_unmodified() {
    run("langchain");
}

/// `add` (which indexes `doc_id` first), queries with and without metadata filters, delete by
/// source document, nodes by id, and `clear`.
#[test]
fn llamaindex_qdrant_vector_store_works_unmodified() {
    run("llamaindex");
}
