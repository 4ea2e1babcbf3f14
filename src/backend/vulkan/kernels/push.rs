//! Push constants: each shader's `Params` block as one `#[repr(C)]` struct, field for field
//! (`push_block!`), and the words a launch hands to `vkCmdPushConstants`. The members each
//! struct lays out are compared with every SPIR-V module's block by a test, so a field added to
//! a shader and not to its struct (or the other way round) fails before any GPU runs it.

use super::launch::dyn_words;
use super::{word, Dyn, Operand};
use crate::backend::vulkan::error::Result;

/// A member of a push-constant block as SPIR-V types it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Member {
    Uint,
    Float,
    Uvec4,
}

impl Member {
    pub fn words(self) -> usize {
        match self {
            Member::Uint | Member::Float => 1,
            Member::Uvec4 => 4,
        }
    }
}

/// A value in a push-constant block: its members in order, and its words.
pub trait PushField {
    fn members(out: &mut Vec<Member>);
    fn put(&self, out: &mut Vec<u32>);
}

impl PushField for u32 {
    fn members(out: &mut Vec<Member>) {
        out.push(Member::Uint);
    }
    fn put(&self, out: &mut Vec<u32>) {
        out.push(*self);
    }
}

impl PushField for f32 {
    fn members(out: &mut Vec<Member>) {
        out.push(Member::Float);
    }
    fn put(&self, out: &mut Vec<u32>) {
        out.push(self.to_bits());
    }
}

impl PushField for [u32; 4] {
    fn members(out: &mut Vec<Member>) {
        out.push(Member::Uvec4);
    }
    fn put(&self, out: &mut Vec<u32>) {
        out.extend(self);
    }
}

/// The members of block `T`, in order.
pub fn members<T: PushField>() -> Vec<Member> {
    let mut out = Vec::new();
    T::members(&mut out);
    out
}

/// A struct mirroring a shader's push-constant block (or a run of its members, such as
/// `Shape`): its fields in the block's order, each a `u32`, `f32`, `[u32; 4]` (a uvec4) or
/// another such struct (the GLSL includes its members in place).
macro_rules! push_block {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $crate::backend::vulkan::kernels::push::PushField for $name {
            fn members(out: &mut Vec<$crate::backend::vulkan::kernels::push::Member>) {
                $(<$ty as $crate::backend::vulkan::kernels::push::PushField>::members(out);)*
            }
            fn put(&self, out: &mut Vec<u32>) {
                $($crate::backend::vulkan::kernels::push::PushField::put(&self.$field, out);)*
            }
        }
    };
}
pub(crate) use push_block;

push_block! {
    /// The members most blocks start with: the output's maximal shape and its dynamic axis
    /// (`runtime_ne` in common.glsl).
    pub struct Shape {
        ne: [u32; 4],
        dynamic: [u32; 4],
    }
}

impl Shape {
    /// The shape of `out` with the run-time length `dynamic`.
    pub fn of(out: &Operand, dynamic: Option<Dyn>) -> Result<Shape> {
        let mut ne = [0; 4];
        for (w, &v) in ne.iter_mut().zip(&out.ne) {
            *w = word(v, "size")?;
        }
        Ok(Shape { ne, dynamic: dyn_words(dynamic)? })
    }
}

push_block! {
    /// `copy.comp`.
    pub struct CopyPush {
        /// 16-byte words to copy.
        n: u32,
    }
}

push_block! {
    /// `subgroup_probe.comp`, which reads none: the layout's one placeholder word.
    pub struct ProbePush {
        unused: u32,
    }
}

/// A launch's push constants: the words of one block, as `vkCmdPushConstants` takes them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PushWords(Vec<u32>);

impl PushWords {
    pub fn of<T: PushField>(block: &T) -> PushWords {
        let mut words = Vec::with_capacity(std::mem::size_of::<T>() / 4);
        block.put(&mut words);
        PushWords(words)
    }
}

impl std::ops::Deref for PushWords {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block's words are its `#[repr(C)]` layout: as many as its size, in field order.
    #[test]
    fn a_blocks_words_follow_its_fields() {
        push_block! {
            pub struct Nested {
                shape: Shape,
                scale: f32,
                n: u32,
            }
        }
        let block = Nested { shape: Shape { ne: [1, 2, 3, 4], dynamic: [5, 6, 7, 8] }, scale: 1.5, n: 9 };
        let words = PushWords::of(&block);
        assert_eq!(&words[..], &[1, 2, 3, 4, 5, 6, 7, 8, 1.5f32.to_bits(), 9]);
        assert_eq!(words.len() * 4, std::mem::size_of::<Nested>());
        assert_eq!(members::<Nested>(), [Member::Uvec4, Member::Uvec4, Member::Float, Member::Uint]);
    }
}
