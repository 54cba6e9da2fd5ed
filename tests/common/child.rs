//! Feeding a child process its standard input.

use std::io::Write;
use std::process::Child;

/// Writes `input` to the child's standard input and closes it. A command that fails on
/// its arguments exits without reading its input, and the write then meets a closed
/// pipe: that is the command's answer, for the test to check, not a failure here.
pub(crate) fn feed(child: &mut Child, input: &[u8]) {
    let mut pipe = child.stdin.take().expect("stdin is piped");
    match pipe.write_all(input) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        written => written.expect("writing the child's input"),
    }
}
