#ifndef GROUPMESH_CSODIUM_SHIM_H
#define GROUPMESH_CSODIUM_SHIM_H
#include <sodium.h>
#endif
