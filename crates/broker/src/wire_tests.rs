//! The wire's reading, with a peer of the test's own.
use super::*;

/// A peer whose pieces never end where a line does.
struct Misaligned(usize);

impl Read for Misaligned {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.0 == 0 {
            return Ok(0);
        }
        self.0 -= 1;
        let piece = b"D\r\nC";
        buf[..piece.len()].copy_from_slice(piece);
        Ok(piece.len())
    }
}

impl Write for Misaligned {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Closing for Misaligned {
    fn close(&mut self) {}
}

/// What was read and used is dropped before the next read: a peer
/// that always leaves part of a line unread does not grow the buffer
/// (it grew by every piece before).
#[test]
fn the_read_buffer_stays_small_however_the_pieces_fall() {
    let mut b = Buffered::new(Misaligned(100_000));
    while let Ok(line) = b.line() {
        assert_eq!(line.len(), if line.starts_with(b"C") { 2 } else { 1 });
    }
    assert!(b.buf.capacity() < 64 * 1024, "{}", b.buf.capacity());
}
