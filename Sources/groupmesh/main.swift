print("groupmesh")
