module mailroomverify

go 1.19
