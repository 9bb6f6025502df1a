//! A heap buffer whose start is aligned for direct I/O (`O_DIRECT` wants the address, the length
//! and the file offset aligned to the device's logical block; 4096 covers every common device).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Alignment of [`AlignedBuf`]: the page size, a multiple of every logical block size in use.
pub const ALIGN: usize = 4096;

/// A zeroed, fixed-size byte buffer starting on an [`ALIGN`] boundary.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: it owns its allocation outright, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only reads.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `len` zero bytes (at least one block is allocated).
    pub fn new(len: usize) -> Self {
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len.max(1).next_multiple_of(ALIGN), ALIGN).expect("a sane buffer size")
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialised (zeroed) bytes live at `ptr` for as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this very layout.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

/// Whether `data` may be written with direct I/O at `offset` as it is.
pub fn is_aligned(data: &[u8], offset: u64) -> bool {
    (data.as_ptr() as usize) % ALIGN == 0 && data.len() % ALIGN == 0 && offset % ALIGN as u64 == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_writable() {
        for len in [1, 4095, 4096, 1 << 20, (1 << 20) + 17] {
            let mut b = AlignedBuf::new(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % ALIGN, 0);
            assert!(b.iter().all(|&x| x == 0));
            b[len - 1] = 7;
            assert_eq!(b[len - 1], 7);
        }
        let b = AlignedBuf::new(8192);
        assert!(is_aligned(&b, 4096));
        assert!(!is_aligned(&b[..100], 0));
        assert!(!is_aligned(&b[1..4097], 0));
        assert!(!is_aligned(&b, 512));
    }
}
