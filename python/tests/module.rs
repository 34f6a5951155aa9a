//! The `cairn_index` Python module as a user gets it: `pip install ./python` in a fresh
//! virtualenv (maturin from PyPI builds the wheel), then `test_cairn_index.py` against it,
//! on the shared datasets.
//!
//! The wheel is built into a target directory of its own beside the workspace's: the
//! `cargo test` running this holds the workspace's, and the extension module is built with
//! `extension-module` on, which the workspace build leaves off.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

/// `PATH` with `dir` first.
fn path_with(dir: &Path) -> OsString {
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(dir.to_path_buf()).chain(std::env::split_paths(&rest)))
        .expect("a PATH")
}

#[test]
fn the_installed_module_passes_its_python_tests() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = cairn_testkit::target_dir(crate_dir);
    let python = cairn_testkit::venv(&target, "venv-cairn-index", &["maturin>=1.5,<2", "numpy"])
        .expect("a virtualenv with maturin and numpy");
    // Built where it is installed from: the wheel of this checkout, not a cached one.
    cairn_testkit::pip_install(&python, &[crate_dir], |pip| {
        pip.args(["--no-build-isolation", "--force-reinstall", "--no-deps"])
            .env("CARGO_TARGET_DIR", target.join("python-wheel"))
            // The build backend runs the virtualenv's `maturin`.
            .env(
                "PATH",
                path_with(python.parent().expect("the venv's bin folder")),
            );
    })
    .expect("the wheel builds and installs (pip install ./python)");
    let data = std::env::var_os("CAIRN_SHARED_DATA")
        .map_or_else(|| crate_dir.join("../../shared/data"), Into::into);
    let tests = Command::new(&python)
        .arg(crate_dir.join("tests/test_cairn_index.py"))
        .arg(&data)
        // Import the installed module, not anything beside the script.
        .current_dir(&target)
        .status()
        .expect("python test_cairn_index.py");
    assert!(
        tests.success(),
        "the module's Python tests failed (output above)"
    );
}
