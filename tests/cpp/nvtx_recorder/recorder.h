/* cudakit_nvtx_recorder: an NVTX injection library for tests (NVTX_INJECTION64_PATH=<it>).
 *
 * It attaches to every NVTX instance in the process (libcudakit's, and any other module that
 * includes the NVTX3 headers) and records each call that reaches it, so tests can check what a
 * real tool such as Nsight Systems would receive: messages, domains, colours, categories,
 * payloads, range ids and threads. Test code reaches the record through dlopen(RTLD_NOLOAD) /
 * ctypes on the same path and the functions below.
 */
#ifndef CUDAKIT_NVTX_RECORDER_H
#define CUDAKIT_NVTX_RECORDER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum cudakit_nvtx_kind {
  CUDAKIT_NVTX_PUSH = 1,
  CUDAKIT_NVTX_POP = 2,
  CUDAKIT_NVTX_MARK = 3,
  CUDAKIT_NVTX_START = 4,
  CUDAKIT_NVTX_END = 5,
  CUDAKIT_NVTX_NAME_CATEGORY = 6,
  CUDAKIT_NVTX_DOMAIN_CREATE = 7
};

typedef struct cudakit_nvtx_event {
  int kind;             /* cudakit_nvtx_kind */
  const char* domain;   /* "" for NVTX's default domain */
  const char* message;  /* "" when none (category / domain name for those kinds) */
  uint32_t color;       /* ARGB; 0 when none */
  uint32_t category;
  int payload_type;     /* NVTX_PAYLOAD_TYPE_*; 0 when none */
  int64_t payload_int64;
  uint64_t payload_uint64;
  double payload_double;
  uint64_t id;          /* range id of START / END */
  uint64_t thread;      /* gettid() of the caller */
} cudakit_nvtx_event;

/* Events recorded so far; pointers stay valid until cudakit_nvtx_recorder_clear(). */
int cudakit_nvtx_recorder_count(void);
const cudakit_nvtx_event* cudakit_nvtx_recorder_event(int index);
void cudakit_nvtx_recorder_clear(void);
/* All events as a JSON array (for Python); valid until the next call. */
const char* cudakit_nvtx_recorder_json(void);
/* How many NVTX instances attached (InitializeInjectionNvtx2 calls that succeeded). */
int cudakit_nvtx_recorder_instances(void);

#ifdef __cplusplus
}
#endif

#endif
