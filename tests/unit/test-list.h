/* Every Check suite of the unit-test runner; tests/unit/main.c runs them all. One line per
 * tests/unit/test-<module>.c, which defines Suite *rtx_<name>_suite(void). */
#define RTX_TEST_SUITES(X)                                                                      \
    X(error)                                                                                    \
    X(tensor)                                                                                   \
    X(graph)                                                                                    \
    X(validate)                                                                                 \
    X(plan)                                                                                     \
    X(plan_replay)                                                                              \
    X(proto)                                                                                    \
    X(npy)                                                                                      \
    X(mem_pool)                                                                                 \
    X(device)                                                                                   \
    X(device_costs)                                                                             \
    X(cpu_elementwise)                                                                          \
    X(cpu_reduce)                                                                               \
    X(cpu_linalg)                                                                               \
    X(cpu_shape)                                                                                \
    X(cpu_conv)                                                                                 \
    X(geometry)                                                                                 \
    X(cuda_device)                                                                              \
    X(cuda_flash)                                                                               \
    X(store)                                                                                    \
    X(store_stress)                                                                             \
    X(jobs)                                                                                 \
    X(jobs_queue)                                                                           \
    X(jobs_sched)                                                                           \
    X(jobs_devices)                                                                         \
    X(jobs_plans)                                                                           \
    X(config)                                                                                   \
    X(config_reload)                                                                            \
    X(log)                                                                                      \
    X(server)                                                                                   \
    X(serving_files)                                                                            \
    X(serving)                                                                                  \
    X(serving_requests)                                                                         \
    X(serving_lanes)                                                                            \
    X(serving_costs)                                                                            \
    X(serving_devices)                                                                          \
    X(device_shared)                                                                            \
    X(sched)                                                                                    \
    X(sched_config)                                                                             \
    X(shm)                                                                                      \
    X(http)                                                                                     \
    X(tokenizer)                                                                                \
    X(tokenizer_sp)                                                                             \
    X(chat_template)
