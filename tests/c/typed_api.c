// Calls the generated typed functions directly; prints results like examples/edge_app, or
// "error CODE MESSAGE" for a failed status. One case per run:
//   typed_api greedy H.npy START CAPACITY   greedy_decoder_run into a buffer of CAPACITY tokens
//   typed_api batch X.npy                   dynamic_batch_run with x_dim0 = the rows of X
//   typed_api batch-negative X.npy          the same with x_dim0 = -1
//   typed_api scalars X.npy N SCALE FLAG    scalar_inputs_run
//   typed_api mismatch VMFB                 greedy_decoder_create_from_file on another bundle's vmfb
//   typed_api wrong-model                   greedy_decoder_run on a dynamic_batch model
//   typed_api old-signature                 the embedded greedy_decoder with its signature marked main_abi 1
//   typed_api threads X.npy CALLS           two dynamic_batch models sharing one instance and device,
//                                           called from two threads at once; prints mismatches
//   typed_api reuse X.npy N SCALE FLAG      scalar_inputs_run 6 times on a model of each buffer reuse
//                                           option; prints the bytes its device allocated after the
//                                           first call and the last call's outputs

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynamic_batch.h"
#include "greedy_decoder.h"
#include "greedy_decoder_vmfb.h"
#include "npy.h"
#include "scalar_inputs.h"

static void print_floats(const char* name, const float* data, iree_host_size_t rank, const int64_t* shape) {
  iree_host_size_t count = 1;
  printf("%s float32 [", name);
  for (iree_host_size_t d = 0; d < rank; ++d) {
    printf("%s%" PRId64, d ? ", " : "", shape[d]);
    count *= (iree_host_size_t)shape[d];
  }
  printf("]");
  for (iree_host_size_t i = 0; i < count; ++i) printf(" %.9g", data[i]);
  printf("\n");
}

static iree_status_t greedy(const char* path, int64_t start, iree_host_size_t capacity) {
  npy_array_t h;
  IREE_RETURN_IF_ERROR(npy_read(path, &h));
  dycl_model_t* model = NULL;
  iree_status_t status = greedy_decoder_create(NULL, &model);
  int64_t* tokens = calloc(capacity + 1, sizeof(int64_t));
  int64_t length = -1;
  if (iree_status_is_ok(status)) status = greedy_decoder_run(model, h.data, start, tokens, capacity, &length);
  // The length is reported also when the tokens did not fit.
  printf("length %" PRId64 "\n", length);
  if (iree_status_is_ok(status)) {
    printf("output0 int64 [%" PRId64 "]", length);
    for (int64_t i = 0; i < length; ++i) printf(" %" PRId64, tokens[i]);
    printf("\n");
  }
  free(tokens);
  dycl_model_release(model);
  npy_array_free(&h);
  return status;
}

static iree_status_t batch(const char* path, bool negative) {
  npy_array_t x;
  IREE_RETURN_IF_ERROR(npy_read(path, &x));
  dycl_model_t* model = NULL;
  iree_status_t status = dynamic_batch_create(NULL, &model);
  int64_t rows = negative ? -1 : x.shape[0];
  float* sums = calloc((size_t)x.shape[0] + 1, sizeof(float));
  int64_t length = -1;
  if (iree_status_is_ok(status)) {
    status = dynamic_batch_run(model, x.data, rows, sums, (iree_host_size_t)x.shape[0], &length);
  }
  if (iree_status_is_ok(status)) print_floats("output0", sums, 1, &length);
  free(sums);
  dycl_model_release(model);
  npy_array_free(&x);
  return status;
}

static iree_status_t scalars(const char* path, int64_t n, float scale, bool flag) {
  npy_array_t x;
  IREE_RETURN_IF_ERROR(npy_read(path, &x));
  dycl_model_t* model = NULL;
  iree_status_t status = scalar_inputs_create(NULL, &model);
  float y[SCALAR_INPUTS_OUTPUT0_ELEMENTS];
  int64_t count = 0;
  float value = 0.0f;
  bool truth = false;
  if (iree_status_is_ok(status)) status = scalar_inputs_run(model, x.data, n, scale, flag, y, &count, &value, &truth);
  if (iree_status_is_ok(status)) {
    print_floats("output0", y, 2, (const int64_t[]){2, 3});
    printf("output1 int %" PRId64 "\noutput2 float %.9g\noutput3 bool %d\n", count, value, truth ? 1 : 0);
  }
  dycl_model_release(model);
  npy_array_free(&x);
  return status;
}

static iree_status_t reuse(const char* path, int64_t n, float scale, bool flag) {
  npy_array_t x;
  IREE_RETURN_IF_ERROR(npy_read(path, &x));
  static const struct {
    const char* name;
    dycl_buffer_reuse_t option;
  } options[] = {{"never", DYCL_BUFFER_REUSE_NEVER},
                 {"always", DYCL_BUFFER_REUSE_ALWAYS},
                 {"as-signature", DYCL_BUFFER_REUSE_AS_SIGNATURE}};
  iree_status_t status = iree_ok_status();
  for (size_t i = 0; i < sizeof(options) / sizeof(options[0]) && iree_status_is_ok(status); ++i) {
    dycl_model_options_t model_options;
    dycl_model_options_initialize(&model_options);
    model_options.reuse_buffers = options[i].option;
    dycl_model_t* model = NULL;
    status = scalar_inputs_create(&model_options, &model);
    float y[SCALAR_INPUTS_OUTPUT0_ELEMENTS];
    int64_t count = 0;
    float value = 0.0f;
    bool truth = false;
    iree_hal_allocator_statistics_t first = {0}, last = {0};
    for (int call = 0; call < 6 && iree_status_is_ok(status); ++call) {
      status = scalar_inputs_run(model, x.data, n, scale, flag, y, &count, &value, &truth);
      iree_hal_allocator_query_statistics(iree_hal_device_allocator(dycl_model_device(model)), call ? &last : &first);
    }
    if (iree_status_is_ok(status)) {
      printf("reuse %s %" PRIu64 "\n", options[i].name,
             (uint64_t)(last.device_bytes_allocated - first.device_bytes_allocated));
      print_floats("output0", y, 2, (const int64_t[]){2, 3});
      printf("output1 int %" PRId64 "\noutput2 float %.9g\noutput3 bool %d\n", count, value, truth ? 1 : 0);
    }
    dycl_model_release(model);
  }
  npy_array_free(&x);
  return status;
}

static iree_status_t mismatch(const char* vmfb) {
  dycl_model_t* model = NULL;
  iree_status_t status = greedy_decoder_create_from_file(NULL, vmfb, &model);
  dycl_model_release(model);
  return status;
}

// Code generated before main_abi 2 (its signature has no main_abi: zero), or for main_abi 1.
static iree_status_t old_signature(void) {
  dycl_signature_t signature = greedy_decoder_signature;
  signature.main_abi = 1;
  dycl_model_t* model = NULL;
  const struct iree_file_toc_t* file = greedy_decoder_vmfb_create();
  iree_status_t status = dycl_model_create_from_memory(NULL, &signature, iree_make_const_byte_span(file->data, file->size),
                                                       &model);
  dycl_model_release(model);
  return status;
}

static iree_status_t wrong_model(void) {
  dycl_model_t* model = NULL;
  IREE_RETURN_IF_ERROR(dynamic_batch_create(NULL, &model));
  float h[8] = {0};
  int64_t tokens[8], length = 0;
  iree_status_t status = greedy_decoder_run(model, h, 1, tokens, 8, &length);
  dycl_model_release(model);
  return status;
}

typedef struct thread_work_t {
  dycl_model_t* model;
  const npy_array_t* x;
  const float* expected;
  long calls;
  long mismatches;
  iree_status_t status;
} thread_work_t;

static void* thread_main(void* argument) {
  thread_work_t* work = argument;
  float sums[64];
  int64_t length = 0;
  for (long call = 0; call < work->calls && iree_status_is_ok(work->status); ++call) {
    memset(sums, 0, sizeof(sums));
    work->status = dynamic_batch_run(work->model, work->x->data, work->x->shape[0], sums, 64, &length);
    if (iree_status_is_ok(work->status) && memcmp(sums, work->expected, (size_t)length * sizeof(float)) != 0) {
      ++work->mismatches;
    }
  }
  return NULL;
}

// Per dycl_runtime.h, models sharing an instance and a device may be called from threads at once.
static iree_status_t threads(const char* path, long calls) {
  npy_array_t x;
  IREE_RETURN_IF_ERROR(npy_read(path, &x));
  if (x.shape[0] > 64) return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "at most 64 rows");
  dycl_model_t* models[2] = {NULL, NULL};
  iree_status_t status = dynamic_batch_create(NULL, &models[0]);
  if (iree_status_is_ok(status)) {
    dycl_model_options_t options;
    dycl_model_options_initialize(&options);
    options.instance = dycl_model_instance(models[0]);
    options.device = dycl_model_device(models[0]);
    status = dynamic_batch_create(&options, &models[1]);
  }
  float expected[64];
  int64_t length = 0;
  if (iree_status_is_ok(status)) status = dynamic_batch_run(models[0], x.data, x.shape[0], expected, 64, &length);
  thread_work_t work[2];
  pthread_t handles[2];
  for (int i = 0; i < 2 && iree_status_is_ok(status); ++i) {
    work[i] = (thread_work_t){models[i], &x, expected, calls, 0, iree_ok_status()};
    pthread_create(&handles[i], NULL, thread_main, &work[i]);
  }
  if (iree_status_is_ok(status)) {
    for (int i = 0; i < 2; ++i) pthread_join(handles[i], NULL);
    printf("mismatches %ld %ld\n", work[0].mismatches, work[1].mismatches);
    status = iree_status_is_ok(work[0].status) ? work[1].status : work[0].status;
  }
  dycl_model_release(models[1]);
  dycl_model_release(models[0]);
  npy_array_free(&x);
  return status;
}

int main(int argc, char** argv) {
  iree_status_t status = iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "usage: see typed_api.c");
  const char* name = argc > 1 ? argv[1] : "";
  if (strcmp(name, "greedy") == 0 && argc == 5) {
    iree_status_ignore(status);
    status = greedy(argv[2], strtoll(argv[3], NULL, 10), (iree_host_size_t)strtoull(argv[4], NULL, 10));
  } else if ((strcmp(name, "batch") == 0 || strcmp(name, "batch-negative") == 0) && argc == 3) {
    iree_status_ignore(status);
    status = batch(argv[2], strcmp(name, "batch-negative") == 0);
  } else if (strcmp(name, "scalars") == 0 && argc == 6) {
    iree_status_ignore(status);
    status = scalars(argv[2], strtoll(argv[3], NULL, 10), strtof(argv[4], NULL), strcmp(argv[5], "1") == 0);
  } else if (strcmp(name, "reuse") == 0 && argc == 6) {
    iree_status_ignore(status);
    status = reuse(argv[2], strtoll(argv[3], NULL, 10), strtof(argv[4], NULL), strcmp(argv[5], "1") == 0);
  } else if (strcmp(name, "mismatch") == 0 && argc == 3) {
    iree_status_ignore(status);
    status = mismatch(argv[2]);
  } else if (strcmp(name, "threads") == 0 && argc == 4) {
    iree_status_ignore(status);
    status = threads(argv[2], strtol(argv[3], NULL, 10));
  } else if (strcmp(name, "old-signature") == 0) {
    iree_status_ignore(status);
    status = old_signature();
  } else if (strcmp(name, "wrong-model") == 0) {
    iree_status_ignore(status);
    status = wrong_model();
  }
  if (iree_status_is_ok(status)) return 0;
  printf("error %s ", iree_status_code_string(iree_status_code(status)));
  fflush(stdout);
  iree_status_fprint(stdout, status);
  iree_status_free(status);
  return 0;
}
