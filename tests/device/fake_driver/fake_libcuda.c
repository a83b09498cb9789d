/* A stand-in for the NVIDIA driver's libcuda.so.1 with nothing in it: what a
 * machine with a driver library but no usable GPU looks like to zeroc. Its
 * presence makes zeroc load the CUDA plugin to count devices; the CUDA
 * runtime then finds no driver entry point and reports no device
 * (tests/device/test_cuda_plugin_driver.c). */
int zc_fake_cuda_driver;
