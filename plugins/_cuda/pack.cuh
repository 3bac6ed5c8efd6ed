// Pack<V>: V elements of T moved as one memory access of V·sizeof(T) bytes (2, 4, 8 or 16): load `raw` through a
// pointer to Pack<V>::Raw, then read the elements from `v` (and the other way round to store). Included by the
// elementwise and row kernels that move 16 bytes a thread (the elementwise family, layer_norm, cross_entropy,
// embedding, the optimizer updates, softmax, and their backwards); its guard lets two headers include it.

#ifndef KZ_PACK_CUH
#define KZ_PACK_CUH

template <int BYTES> struct RawOf;
template <> struct RawOf<2> { typedef unsigned short type; };
template <> struct RawOf<4> { typedef unsigned int type; };
template <> struct RawOf<8> { typedef uint2 type; };
template <> struct RawOf<16> { typedef uint4 type; };

template <int V> union Pack {
  typedef typename RawOf<V * (int)sizeof(T)>::type Raw;
  Raw raw;
  T v[V];
};

#endif
