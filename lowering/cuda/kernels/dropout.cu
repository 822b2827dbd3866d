/* ------------------------------------------------------------------ dropout (NumPy's Philox4x64-10) */

TR_DEV void philox_round(u64* ctr, const u64* key) {
  u64 lo0 = 0xD2E7470EE14C6C93ULL * ctr[0], hi0 = tr_mulhi64(0xD2E7470EE14C6C93ULL, ctr[0]);
  u64 lo1 = 0xCA5A826395121157ULL * ctr[2], hi1 = tr_mulhi64(0xCA5A826395121157ULL, ctr[2]);
  u64 c1 = ctr[1], c3 = ctr[3];
  ctr[0] = hi1 ^ c1 ^ key[0];
  ctr[1] = lo1;
  ctr[2] = hi0 ^ c3 ^ key[1];
  ctr[3] = lo0;
}

/* 32-bit draw number i of numpy.random.Philox(key=seed, counter=calls << 64) */
TR_DEV unsigned int philox_u32(u64 seed, u64 calls, i64 i) {
  u64 q = (u64)i >> 1;
  u64 ctr[4] = {(q >> 2) + 1, calls, 0, 0};
  u64 key[2] = {seed, 0};
  for (int r = 0; r < 10; r++) {
    if (r) { key[0] += 0x9E3779B97F4A7C15ULL; key[1] += 0xBB67AE8584CAA73BULL; }
    philox_round(ctr, key);
  }
  u64 word = ctr[q & 3];
  return (i & 1) ? (unsigned int)(word >> 32) : (unsigned int)(word & 0xffffffffULL);
}

TR_GLOBAL void tr_dropout_fwd(const void* x, int dtx, void* y, int dty, signed char* mask, i64 n, const int* rng,
                              float p, float scale) {
  u64 seed = (u64)(unsigned int)rng[0], calls = (u64)(unsigned int)rng[1];
  GRID_LOOP(i, n) {
    float u = (float)(philox_u32(seed, calls, i) >> 8) * (1.0f / 16777216.0f);
    bool keep = u >= p;
    mask[i] = keep ? 1 : 0;
    stf(y, dty, i, (ldf(x, dtx, i) * (keep ? 1.0f : 0.0f)) * scale);
  }
}

TR_GLOBAL void tr_dropout_advance(int* rng) {
  if (TR_TID == 0) rng[1] = (int)(((unsigned int)rng[1] + 1u) & 0x7FFFFFFFu);
}

