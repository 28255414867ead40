// paddock/paddock.h: the whole public C++ API in one include: the engine (paddock/engine.h),
// chat formatting (paddock/chat.h) and evaluation (paddock/eval.h). Many requests at once go
// through paddock/service.h. Library code includes the narrowest header it needs.
#pragma once

#include "paddock/chat.h"
#include "paddock/engine.h"
#include "paddock/eval.h"
