//! `xdr_struct!`: an XDR structure whose fields are all [`XdrCodec`]s, encoded and decoded
//! in declaration order (RFC 4506 §4.14). Structures that borrow from the message name
//! their lifetime `'d`, the codec's data lifetime.

macro_rules! xdr_struct {
    (
        $(#[$m:meta])*
        pub struct $name:ident<'d> { $( $(#[$fm:meta])* pub $f:ident : $t:ty, )* }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name<'d> { $( $(#[$fm])* pub $f: $t, )* }

        impl<'d> $crate::ddp::XdrCodec<'d> for $name<'d> {
            fn encode(
                &self,
                e: &mut $crate::ddp::DdpEncoder<'_, 'd>,
            ) -> Result<(), $crate::ddp::DdpEncodeError> {
                $( $crate::ddp::XdrCodec::encode(&self.$f, e)?; )*
                Ok(())
            }
            fn decode(
                c: &mut $crate::ddp::DdpCursor<'d>,
            ) -> Result<Self, $crate::ddp::DdpDecodeError> {
                Ok($name { $( $f: <$t as $crate::ddp::XdrCodec<'d>>::decode(c)?, )* })
            }
        }
    };
    (
        $(#[$m:meta])*
        pub struct $name:ident { $( $(#[$fm:meta])* pub $f:ident : $t:ty, )* }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name { $( $(#[$fm])* pub $f: $t, )* }

        impl<'d> $crate::ddp::XdrCodec<'d> for $name {
            fn encode(
                &self,
                e: &mut $crate::ddp::DdpEncoder<'_, 'd>,
            ) -> Result<(), $crate::ddp::DdpEncodeError> {
                $( $crate::ddp::XdrCodec::encode(&self.$f, e)?; )*
                Ok(())
            }
            fn decode(
                c: &mut $crate::ddp::DdpCursor<'d>,
            ) -> Result<Self, $crate::ddp::DdpDecodeError> {
                Ok($name { $( $f: <$t as $crate::ddp::XdrCodec<'d>>::decode(c)?, )* })
            }
        }
    };
}

pub(crate) use xdr_struct;
