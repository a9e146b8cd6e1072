//! HTTP/3's codec: frames and QUIC integers (`frame`), QPACK without a
//! dynamic table (`qpack`) and its Huffman code (`huffman`). Nothing here
//! does I/O; the connection that feeds it is `crate::server::h3`.

pub mod frame;
pub mod huffman;
pub mod qpack;
