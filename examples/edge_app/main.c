// edge_app: runs the bundle embedded as `model` (model.h) on inputs from .npy files or argv.
//
//   edge_app [--device local-sync|local-task|vulkan] [--vmfb FILE] [--bench N] INPUT...
//
// One INPUT per model input, in order: a .npy file for a tensor, a number for an int or a float,
// 0/1/true/false for a bool. Prints one line per output, e.g.
//   output0 float32 [1, 4] 0.125 -1.5 2 0.25
//   output1 int 1
// --bench N then times N more calls on the same inputs and prints
//   bench calls=N us_per_call=X cpu_us_per_call=Y
// --vmfb FILE loads that vmfb (of the same bundle) instead of the embedded one.

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"
#include "npy.h"

// Outputs whose size varies start with this many elements and grow when a result needs more.
#define EDGE_APP_INITIAL_CAPACITY 1024

typedef struct app_flags_t {
  const char* device;
  const char* vmfb;
  long bench_calls;
  int input_count;
  char** inputs;
} app_flags_t;

static iree_status_t parse_flags(int argc, char** argv, app_flags_t* flags) {
  memset(flags, 0, sizeof(*flags));
  flags->device = "local-sync";
  int i = 1;
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; ++i) {
    if (i + 1 >= argc) return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s needs a value", argv[i]);
    if (strcmp(argv[i], "--device") == 0) {
      flags->device = argv[++i];
    } else if (strcmp(argv[i], "--vmfb") == 0) {
      flags->vmfb = argv[++i];
    } else if (strcmp(argv[i], "--bench") == 0) {
      flags->bench_calls = strtol(argv[++i], NULL, 10);
    } else {
      return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "unknown flag %s", argv[i]);
    }
  }
  flags->input_count = argc - i;
  flags->inputs = argv + i;
  return iree_ok_status();
}

// Reads input |index| from its command-line text; tensors are read into |array| (owned by the caller).
static iree_status_t read_input(const dycl_value_spec_t* spec, iree_host_size_t index, const char* text,
                                npy_array_t* array, dycl_value_t* out_value) {
  char* end = NULL;
  switch (spec->kind) {
    case DYCL_KIND_TENSOR:
      IREE_RETURN_IF_ERROR(npy_read(text, array));
      if (array->dtype != spec->dtype) {
        return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "input %" PRIhsz " ('%s'): %s holds %s, the model takes %s",
                                index, spec->name, text, dycl_dtype_name(array->dtype), dycl_dtype_name(spec->dtype));
      }
      *out_value = dycl_value_tensor(array->data, array->rank, array->shape);
      return iree_ok_status();
    case DYCL_KIND_INT:
      *out_value = dycl_value_int(strtoll(text, &end, 10));
      break;
    case DYCL_KIND_FLOAT:
      *out_value = dycl_value_float(strtof(text, &end));
      break;
    case DYCL_KIND_BOOL:
      if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0) {
        *out_value = dycl_value_bool(true);
      } else if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0) {
        *out_value = dycl_value_bool(false);
      } else {
        return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "input %" PRIhsz " ('%s') must be true/false/1/0, not %s",
                                index, spec->name, text);
      }
      return iree_ok_status();
  }
  if (end == text || *end != '\0') {
    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "input %" PRIhsz " ('%s') must be a number, not %s", index,
                            spec->name, text);
  }
  return iree_ok_status();
}

static iree_host_size_t static_count(const dycl_value_spec_t* spec) {
  iree_host_size_t count = 1;
  for (iree_host_size_t d = 0; d < spec->rank; ++d) {
    if (spec->shape[d] == DYCL_DYNAMIC_DIM) return 0;
    count *= (iree_host_size_t)spec->shape[d];
  }
  return count;
}

static iree_status_t allocate_output(const dycl_value_spec_t* spec, iree_host_size_t capacity, dycl_value_t* value) {
  switch (spec->kind) {
    case DYCL_KIND_TENSOR: {
      void* data = realloc(value->kind == DYCL_KIND_TENSOR ? value->tensor.data : NULL,
                           (capacity ? capacity : 1) * dycl_dtype_size(spec->dtype));
      if (!data) return iree_make_status(IREE_STATUS_RESOURCE_EXHAUSTED, "out of memory");
      *value = dycl_value_output(data, capacity);
      break;
    }
    case DYCL_KIND_INT:
      *value = dycl_value_int(0);
      break;
    case DYCL_KIND_FLOAT:
      *value = dycl_value_float(0.0f);
      break;
    case DYCL_KIND_BOOL:
      *value = dycl_value_bool(false);
      break;
  }
  return iree_ok_status();
}

static void print_output(const dycl_value_spec_t* spec, const dycl_value_t* value) {
  switch (spec->kind) {
    case DYCL_KIND_INT:
      printf("%s int %" PRId64 "\n", spec->name, value->i64);
      return;
    case DYCL_KIND_FLOAT:
      printf("%s float %.9g\n", spec->name, value->f32);
      return;
    case DYCL_KIND_BOOL:
      printf("%s bool %d\n", spec->name, value->boolean ? 1 : 0);
      return;
    case DYCL_KIND_TENSOR:
      break;
  }
  const dycl_tensor_t* tensor = &value->tensor;
  printf("%s %s [", spec->name, dycl_dtype_name(spec->dtype));
  iree_host_size_t count = 1;
  for (iree_host_size_t d = 0; d < tensor->rank; ++d) {
    printf("%s%" PRId64, d ? ", " : "", tensor->shape[d]);
    count *= (iree_host_size_t)tensor->shape[d];
  }
  printf("]");
  for (iree_host_size_t i = 0; i < count; ++i) {
    switch (spec->dtype) {
      case DYCL_DTYPE_FLOAT32:
        printf(" %.9g", ((const float*)tensor->data)[i]);
        break;
      case DYCL_DTYPE_FLOAT64:
        printf(" %.17g", ((const double*)tensor->data)[i]);
        break;
      case DYCL_DTYPE_INT64:
        printf(" %" PRId64, ((const int64_t*)tensor->data)[i]);
        break;
      case DYCL_DTYPE_INT32:
        printf(" %" PRId32, ((const int32_t*)tensor->data)[i]);
        break;
      case DYCL_DTYPE_INT16:
        printf(" %d", ((const int16_t*)tensor->data)[i]);
        break;
      case DYCL_DTYPE_INT8:
        printf(" %d", ((const int8_t*)tensor->data)[i]);
        break;
      case DYCL_DTYPE_UINT8:
      case DYCL_DTYPE_BOOL:
        printf(" %d", ((const uint8_t*)tensor->data)[i]);
        break;
      case DYCL_DTYPE_FLOAT16:
        printf(" 0x%04x", ((const uint16_t*)tensor->data)[i]);
        break;
    }
  }
  printf("\n");
}

// Calls the model; an output whose result did not fit is grown to the size the call reported, once.
static iree_status_t call_model(dycl_model_t* model, const dycl_value_t* inputs, dycl_value_t* outputs) {
  iree_status_t status = model_run_values(model, inputs, outputs);
  if (iree_status_code(status) != IREE_STATUS_RESOURCE_EXHAUSTED) return status;
  iree_status_ignore(status);
  for (iree_host_size_t i = 0; i < model_signature.output_count; ++i) {
    const dycl_value_spec_t* spec = &model_signature.outputs[i];
    if (spec->kind != DYCL_KIND_TENSOR) continue;
    iree_host_size_t needed = 1;
    for (iree_host_size_t d = 0; d < spec->rank; ++d) needed *= (iree_host_size_t)outputs[i].tensor.shape[d];
    if (needed > outputs[i].tensor.capacity) {
      IREE_RETURN_IF_ERROR(allocate_output(spec, needed, &outputs[i]));
    }
  }
  return model_run_values(model, inputs, outputs);
}

static double seconds_of(clockid_t clock) {
  struct timespec time;
  clock_gettime(clock, &time);
  return (double)time.tv_sec + 1e-9 * (double)time.tv_nsec;
}

static iree_status_t run(const app_flags_t* flags, npy_array_t* arrays, dycl_value_t* inputs, dycl_value_t* outputs) {
  const dycl_signature_t* signature = &model_signature;
  if ((iree_host_size_t)flags->input_count != signature->input_count) {
    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s takes %" PRIhsz " inputs, got %d", signature->model,
                            signature->input_count, flags->input_count);
  }
  for (iree_host_size_t i = 0; i < signature->input_count; ++i) {
    IREE_RETURN_IF_ERROR(read_input(&signature->inputs[i], i, flags->inputs[i], &arrays[i], &inputs[i]));
  }
  for (iree_host_size_t i = 0; i < signature->output_count; ++i) {
    const dycl_value_spec_t* spec = &signature->outputs[i];
    iree_host_size_t count = static_count(spec);
    IREE_RETURN_IF_ERROR(allocate_output(spec, count ? count : EDGE_APP_INITIAL_CAPACITY, &outputs[i]));
  }

  dycl_model_options_t options;
  dycl_model_options_initialize(&options);
  options.device_uri = iree_make_cstring_view(flags->device);
  dycl_model_t* model = NULL;
  IREE_RETURN_IF_ERROR(flags->vmfb ? model_create_from_file(&options, flags->vmfb, &model)
                                   : model_create(&options, &model));
  iree_status_t status = call_model(model, inputs, outputs);
  for (iree_host_size_t i = 0; i < signature->output_count && iree_status_is_ok(status); ++i) {
    print_output(&signature->outputs[i], &outputs[i]);
  }
  if (iree_status_is_ok(status) && flags->bench_calls > 0) {
    double start = seconds_of(CLOCK_MONOTONIC), cpu_start = seconds_of(CLOCK_PROCESS_CPUTIME_ID);
    for (long call = 0; call < flags->bench_calls && iree_status_is_ok(status); ++call) {
      status = model_run_values(model, inputs, outputs);
    }
    double seconds = seconds_of(CLOCK_MONOTONIC) - start;
    double cpu_seconds = seconds_of(CLOCK_PROCESS_CPUTIME_ID) - cpu_start;
    if (iree_status_is_ok(status)) {
      // CPU time (all threads of the process) next to wall time: on a loaded machine the wall
      // time also counts the time other processes held the core.
      printf("bench calls=%ld us_per_call=%.3f cpu_us_per_call=%.3f\n", flags->bench_calls,
             1e6 * seconds / (double)flags->bench_calls, 1e6 * cpu_seconds / (double)flags->bench_calls);
    }
  }
  dycl_model_release(model);
  return status;
}

int main(int argc, char** argv) {
  app_flags_t flags;
  iree_status_t status = parse_flags(argc, argv, &flags);
  iree_host_size_t input_count = model_signature.input_count, output_count = model_signature.output_count;
  npy_array_t* arrays = calloc(input_count + 1, sizeof(npy_array_t));
  dycl_value_t* inputs = calloc(input_count + 1, sizeof(dycl_value_t));
  dycl_value_t* outputs = calloc(output_count + 1, sizeof(dycl_value_t));
  if (iree_status_is_ok(status)) status = run(&flags, arrays, inputs, outputs);
  for (iree_host_size_t i = 0; i < input_count; ++i) npy_array_free(&arrays[i]);
  for (iree_host_size_t i = 0; i < output_count; ++i) {
    if (outputs[i].kind == DYCL_KIND_TENSOR) free(outputs[i].tensor.data);
  }
  free(arrays);
  free(inputs);
  free(outputs);
  if (!iree_status_is_ok(status)) {
    fprintf(stderr, "edge_app: ");
    iree_status_fprint(stderr, status);
    iree_status_free(status);
    return 1;
  }
  return 0;
}
