#include "npy.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  const char* descr;
  dycl_dtype_t dtype;
} npy_dtypes[] = {
    {"<f4", DYCL_DTYPE_FLOAT32}, {"<f8", DYCL_DTYPE_FLOAT64}, {"<f2", DYCL_DTYPE_FLOAT16},
    {"<i8", DYCL_DTYPE_INT64},   {"<i4", DYCL_DTYPE_INT32},   {"<i2", DYCL_DTYPE_INT16},
    {"|i1", DYCL_DTYPE_INT8},    {"|u1", DYCL_DTYPE_UINT8},   {"|b1", DYCL_DTYPE_BOOL},
};

// The text after `'key':` in the header dict, or NULL.
static const char* npy_field(const char* header, const char* key) {
  const char* at = strstr(header, key);
  if (!at) return NULL;
  at = strchr(at + strlen(key), ':');
  if (!at) return NULL;
  ++at;
  while (*at == ' ') ++at;
  return at;
}

static iree_status_t npy_parse_header(const char* path, const char* header, npy_array_t* array) {
  const char* descr = npy_field(header, "'descr'");
  if (!descr || *descr != '\'') {
    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s: .npy header has no 'descr'", path);
  }
  bool known = false;
  for (size_t i = 0; i < sizeof(npy_dtypes) / sizeof(npy_dtypes[0]); ++i) {
    if (strncmp(descr + 1, npy_dtypes[i].descr, 3) == 0 && descr[4] == '\'') {
      array->dtype = npy_dtypes[i].dtype;
      known = true;
    }
  }
  if (!known) {
    return iree_make_status(IREE_STATUS_UNIMPLEMENTED, "%s: dtype %.8s is not supported (little-endian only)", path,
                            descr);
  }
  const char* order = npy_field(header, "'fortran_order'");
  if (!order || strncmp(order, "False", 5) != 0) {
    return iree_make_status(IREE_STATUS_UNIMPLEMENTED, "%s: only C-ordered arrays are supported", path);
  }
  const char* shape = npy_field(header, "'shape'");
  if (!shape || *shape != '(') {
    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s: .npy header has no 'shape'", path);
  }
  array->rank = 0;
  array->count = 1;
  for (const char* at = shape + 1; *at && *at != ')';) {
    if (*at == ',' || *at == ' ') {
      ++at;
      continue;
    }
    char* end = NULL;
    long long size = strtoll(at, &end, 10);
    if (end == at || size < 0 || array->rank == DYCL_MAX_RANK) {
      return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s: cannot read the shape %.40s", path, shape);
    }
    array->shape[array->rank++] = size;
    array->count *= (iree_host_size_t)size;
    at = end;
  }
  return iree_ok_status();
}

iree_status_t npy_read(const char* path, npy_array_t* out_array) {
  memset(out_array, 0, sizeof(*out_array));
  FILE* file = fopen(path, "rb");
  if (!file) return iree_make_status(IREE_STATUS_NOT_FOUND, "%s: cannot open", path);
  unsigned char prefix[10];
  iree_status_t status = iree_ok_status();
  if (fread(prefix, 1, 8, file) != 8 || memcmp(prefix, "\x93NUMPY", 6) != 0) {
    status = iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s: not a .npy file", path);
  }
  size_t header_length = 0;
  if (iree_status_is_ok(status)) {
    // Version 1 stores the header length in 2 bytes, versions 2 and 3 in 4.
    size_t width = prefix[6] == 1 ? 2 : 4;
    if (fread(prefix + 8, 1, width, file) != width) {
      status = iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s: truncated header", path);
    } else {
      for (size_t i = 0; i < width; ++i) header_length |= (size_t)prefix[8 + i] << (8 * i);
    }
  }
  char* header = NULL;
  if (iree_status_is_ok(status)) {
    header = calloc(header_length + 1, 1);
    if (!header || fread(header, 1, header_length, file) != header_length) {
      status = iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s: truncated header", path);
    }
  }
  if (iree_status_is_ok(status)) status = npy_parse_header(path, header, out_array);
  free(header);
  if (iree_status_is_ok(status)) {
    size_t bytes = out_array->count * dycl_dtype_size(out_array->dtype);
    out_array->data = malloc(bytes ? bytes : 1);
    if (!out_array->data || fread(out_array->data, 1, bytes, file) != bytes) {
      status = iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s: truncated data (%zu bytes expected)", path, bytes);
    }
  }
  fclose(file);
  if (!iree_status_is_ok(status)) npy_array_free(out_array);
  return status;
}

void npy_array_free(npy_array_t* array) {
  free(array->data);
  array->data = NULL;
}
