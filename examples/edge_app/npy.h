// Reading .npy files (NumPy's format, version 1-3): little-endian, C order.
#ifndef EDGE_APP_NPY_H_
#define EDGE_APP_NPY_H_

#include "dycl_runtime.h"

typedef struct npy_array_t {
  dycl_dtype_t dtype;
  iree_host_size_t rank;
  int64_t shape[DYCL_MAX_RANK];
  void* data;  // owned; free with npy_array_free
  iree_host_size_t count;
} npy_array_t;

// Reads |path| into |out_array|; a status naming the file and the problem otherwise.
iree_status_t npy_read(const char* path, npy_array_t* out_array);
void npy_array_free(npy_array_t* array);

#endif  // EDGE_APP_NPY_H_
