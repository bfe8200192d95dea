"""chat_en: hand-written English conversations (part A: explanations, science, everyday knowledge)."""

CONVERSATIONS = [
[
("user", r'''
Can you explain how vaccines work? Keep it simple, I'm not a biologist.
'''),
("assistant", r'''
Sure. A vaccine is a practice run for your immune system.

1. **Your immune system learns by example.** When a germ infects you, your body eventually recognises specific parts of it, often proteins on its surface, and builds defences targeted at those parts: antibodies and specialised white blood cells.
2. **That first time is slow.** It can take a week or two to build a strong response, which is why you get sick in the meantime.
3. **A vaccine shows your immune system those same parts without the real danger.** Depending on the vaccine, that might be an inactivated (killed) germ, a weakened version, a single harmless protein from the germ, or instructions (like mRNA) that let your own cells make that protein briefly.
4. **Your body builds "memory".** Some of the cells that responded stick around for months or years as memory cells.
5. **If the real germ shows up later,** those memory cells recognise it and mount a fast, strong response, often before you feel sick, or so that the illness is much milder.

Side effects like a sore arm, tiredness or a mild fever for a day are signs of the immune system doing this training.

Some vaccines need boosters because the memory fades over time, or because the germ changes (flu does this every year, so the vaccine is updated).
'''),
],
[
("user", r'''
Why is the sky blue? And why are sunsets red then?
'''),
("assistant", r'''
Both come from the same effect: **sunlight scattering off the molecules in the air**.

**Why blue during the day**

Sunlight contains all colours. When it passes through the atmosphere, it bumps into nitrogen and oxygen molecules, which are much smaller than the wavelength of light. Such tiny particles scatter short wavelengths (blue, violet) far more strongly than long ones (red). This is called *Rayleigh scattering*; the strength goes roughly with 1/wavelength⁴, so blue light is scattered several times more than red.

That scattered blue light comes at you from every direction in the sky, so the whole sky looks blue.

*Why not violet, which scatters even more?* The sun emits less violet than blue, some is absorbed high in the atmosphere, and our eyes are less sensitive to violet. The mix we perceive ends up sky blue.

**Why red at sunset**

When the sun is low, its light travels through much more air to reach you, tens of times more than at midday. Along that long path most of the blue is scattered out sideways, so what's left in the direct beam is mainly orange and red. Dust, smoke or sea salt in the air can make sunsets even more vivid.

So: at noon you see the scattered blue light; at sunset you see what's left after the blue has been scattered away.
'''),
],
[
("user", r'''
What's the difference between weather and climate? My uncle says a cold winter proves global warming isn't real.
'''),
("assistant", r'''
**Weather** is what the atmosphere is doing at a particular place and time: today's temperature, this week's rain, a cold snap in January. It changes hour to hour and day to day.

**Climate** is the long-term pattern of weather, typically averaged over 30 years or more: how warm a region's summers usually are, how much rain it gets in a typical year, how often heat waves occur.

A handy phrase: *climate is what you expect, weather is what you get.*

About your uncle's argument: one cold winter in one place is weather. Global warming is about the long-term average across the whole planet. Both can be true at once:

- Even in a warming climate, cold winters still happen; they just become **less frequent** and the record highs start to outnumber record lows.
- A cold winter in one region can coincide with an unusually warm one somewhere else. Global averages smooth out those regional swings.
- The warming trend shows up clearly when you look at decades of data: each of the recent decades has been warmer on average than the one before it.

An analogy that might land with him: one bad day at the casino doesn't tell you the house edge. You need many days of data to see the trend, and the trend is what climate scientists measure.
'''),
],
[
("user", r'''
How does GPS actually know where I am? Does my phone send something to the satellites?
'''),
("assistant", r'''
Your phone doesn't send anything to the satellites. GPS is **receive-only**: the satellites broadcast, and your phone listens.

**What the satellites send.** Each GPS satellite continuously broadcasts a signal that says, in effect, "I'm satellite number N, this is exactly where I am, and this is exactly what time it is." They carry very precise atomic clocks.

**How your phone uses it.**

1. Your phone receives signals from several satellites at once.
2. Radio signals travel at the speed of light, so a signal that was sent at time *t* and arrives slightly later tells you how far away that satellite is: distance = delay × speed of light.
3. Knowing your distance to one satellite puts you somewhere on a sphere around it. With several satellites, the spheres intersect at one point: your position. This is called *trilateration*.

**Why it needs four satellites, not three.** Your phone's clock is nowhere near as accurate as an atomic clock, and a timing error of one microsecond would mean a position error of about 300 metres. So the phone treats its own clock error as an extra unknown. Four unknowns (x, y, z and clock error) need at least four satellites.

**A fun detail:** the satellites' clocks have to be corrected for relativity. Because they move fast and sit higher in Earth's gravity well, their clocks run about 38 microseconds per day fast relative to clocks on the ground. Uncorrected, positions would drift by kilometres per day.

Phones also speed things up with "assisted GPS": they download satellite positions over the mobile network and use Wi-Fi and cell towers for a rough first guess, which is why you get a fix in seconds instead of minutes.
'''),
],
[
("user", r'''
Explain photosynthesis like I'm in high school. Include the equation.
'''),
("assistant", r'''
Photosynthesis is how plants, algae and some bacteria turn light energy into chemical energy stored in sugar.

**The overall equation**

$$6\,CO_2 + 6\,H_2O \xrightarrow{\text{light}} C_6H_{12}O_6 + 6\,O_2$$

In words: carbon dioxide plus water, using light energy, makes glucose and oxygen.

**Where it happens.** In the **chloroplasts**, mostly in leaf cells. Chloroplasts contain **chlorophyll**, a green pigment that absorbs red and blue light and reflects green (which is why leaves look green).

**Two stages**

1. **Light-dependent reactions** (in the thylakoid membranes):
   - Chlorophyll absorbs light.
   - Water molecules are split. This releases **oxygen**, which is the O₂ plants give off.
   - The energy is captured in two carrier molecules, **ATP** and **NADPH**.
2. **Calvin cycle** (light-independent reactions, in the stroma):
   - The plant uses ATP and NADPH to "fix" carbon from CO₂ into sugar molecules.
   - An enzyme called **RuBisCO** does the carbon-grabbing step; it's often said to be the most abundant protein on Earth.

**Common exam traps**

- The oxygen released comes from **water**, not from CO₂.
- "Light-independent" doesn't mean it happens at night; it just doesn't use light directly. It depends on the ATP and NADPH made in the light.
- Plants also do **cellular respiration**, all the time, to use the sugar they make. Photosynthesis stores energy; respiration releases it.
'''),
],
[
("user", r'''
What's the tallest mountain in the world? I've heard three different answers.
'''),
("assistant", r'''
You've probably heard three answers because there are three reasonable ways to measure "tallest":

| measure | winner | figure |
|---|---|---|
| Height above sea level | **Mount Everest** (Nepal/China) | about 8,849 m |
| Base to peak | **Mauna Kea** (Hawaii) | about 10,200 m, though only ~4,207 m is above sea level; most of it is underwater |
| Farthest from Earth's centre | **Chimborazo** (Ecuador) | about 2 km farther out than Everest's summit |

Why Chimborazo: Earth bulges at the equator because it spins, so a point on the equator sits farther from the centre than a point at Everest's latitude, even though Chimborazo is "only" about 6,263 m above sea level.

In everyday usage, and in pretty much every atlas, "tallest mountain" means highest above sea level, which is Everest.
'''),
],
[
("user", r'''
What's the difference between viruses and bacteria? Why won't my doctor give me antibiotics for a cold?
'''),
("assistant", r'''
**Bacteria** are complete living cells. They have their own machinery to eat, grow and divide. Most are harmless or even helpful (your gut is full of them), and some cause disease, such as strep throat or many urinary tract infections.

**Viruses** are much smaller and aren't cells at all. A virus is basically genetic material in a protein coat. It can't do anything on its own; it has to get inside one of your cells and hijack that cell's machinery to make copies of itself. Colds, flu and COVID-19 are caused by viruses.

**Why antibiotics don't help a cold.** Antibiotics work by attacking structures and processes that bacteria have and your cells don't, such as bacterial cell walls or bacterial ribosomes. Viruses don't have any of those, so an antibiotic has nothing to hit.

Taking them anyway isn't harmless:

- Side effects (stomach upset, allergic reactions) with zero benefit.
- They kill off some of your helpful gut bacteria.
- Every unnecessary course gives bacteria more chances to evolve **resistance**, which makes antibiotics less effective for everyone when they're truly needed.

What helps with a cold is rest, fluids, and symptom relief. See a doctor if symptoms last beyond about 10 days, get worse after improving, or you have a high fever or difficulty breathing; sometimes a bacterial infection follows a viral one, and then antibiotics may be appropriate.
'''),
],
[
("user", r'''
Why do we have seasons? My kid asked and I said it's because Earth is closer to the sun in summer, but now I'm not sure.
'''),
("assistant", r'''
Good instinct to double-check: that's a really common explanation, but it's not the reason. Here's a version you can tell your kid.

**The real reason: Earth is tilted.**

Earth spins around an axis that's tilted by about 23.4° compared with its path around the sun. That tilt always points the same direction in space as Earth goes around the sun. So:

- For part of the year, your half of the Earth (hemisphere) leans **toward** the sun. The sun climbs higher in the sky, its light hits the ground more directly, and days are longer. That's summer.
- Six months later, your hemisphere leans **away**. The sun stays low, the light comes in at a slant and is spread over more ground, and days are short. That's winter.

**A quick proof it isn't about distance:** when it's summer in the Northern Hemisphere, it's winter in Australia. If distance were the cause, the whole planet would have summer at the same time. In fact, Earth is *closest* to the sun in early January, in the middle of northern winter.

**Try this at home:** shine a flashlight straight down on a table, then tilt it. The tilted beam makes a bigger, dimmer patch, the same light spread over more area. That's winter sunlight.
'''),
],
[
("user", r'''
Why do cats purr? Is it always because they're happy?
'''),
("assistant", r'''
Not always. Purring is usually a sign of contentment, but cats also purr when they're stressed, in pain, giving birth, or even close to death. Scientists still don't fully agree on all of its purposes.

**How they do it.** Muscles in the larynx (voice box) twitch rapidly, opening and closing the space around the vocal cords as the cat breathes in and out. That's why the purr continues through both breaths. The signal seems to come from a kind of neural oscillator in the brain.

**What it seems to be for**

- **Contentment and bonding:** kittens purr while nursing, and mothers purr back. Adult cats purr when relaxed with people they trust.
- **Self-soothing:** a stressed or injured cat may purr to calm itself, a bit like a person humming when nervous.
- **Solicitation:** some cats use a special purr when asking for food, with a higher-pitched, cry-like component mixed in, which people find hard to ignore.
- **Possibly healing:** purr frequencies mostly fall around 25–150 Hz. There's a hypothesis that vibration in that range could support bone and tissue repair. It's intriguing but not firmly established.

So read the context: a purring cat kneading your lap is happy; a purring cat hiding under the bed and not eating may be unwell and worth a vet visit.
'''),
],
[
("user", r'''
How do noise-cancelling headphones work?
'''),
("assistant", r'''
They fight sound with sound.

**Sound is a pressure wave.** Air pressure rises and falls rapidly as the wave passes. If you add a second wave that's the exact mirror image of the first (high where the first is low and vice versa), the two cancel out. This is called *destructive interference*.

**What active noise cancellation (ANC) does**

1. Small microphones on the earcups pick up the noise around you.
2. A chip analyses it and generates an "anti-noise" signal, the same wave flipped upside down.
3. The speaker plays that anti-noise along with your music.
4. Inside your ear, the noise and anti-noise largely cancel. Many headphones also have a mic *inside* the cup to check what's left and correct it continuously.

**Why it works best on droning sounds.** Steady, low-frequency noise like a plane engine, train rumble or air conditioning is predictable, so the electronics can keep up. Sudden or high-pitched sounds such as voices, a dog barking or keyboard clicks change too fast.

That's where **passive** isolation comes in: the physical seal of the earcups or ear tips blocks higher frequencies. Good noise-cancelling headphones combine both: electronics for the low rumble, padding for the rest.

The "pressure" feeling some people notice with ANC is real in the sense that your ears sense the missing low-frequency sound, but there's no actual pressure change. Many people stop noticing it after a while.
'''),
],
[
("user", r'''
Explain inflation, and why central banks raise interest rates to fight it. Use an example.
'''),
("assistant", r'''
**Inflation** is a general rise in prices across the economy, so each unit of money buys less than before. If inflation is 5% a year, a basket of groceries that cost $100 last year costs about $105 now.

Some inflation (central banks often target around 2%) is considered normal. Problems start when it runs high: savings lose value, people and businesses can't plan, and wages often lag behind prices.

**Why raising interest rates helps**

When a central bank raises its policy rate, borrowing becomes more expensive throughout the economy: mortgages, car loans, business loans, credit cards. That works through a chain of effects:

1. **People and firms borrow and spend less.** A family postpones buying a car because the monthly payment went up; a company delays building a new warehouse.
2. **Saving becomes more attractive**, since deposits pay more interest.
3. **Demand cools.** With fewer buyers competing for goods and services, businesses can't raise prices as easily.
4. **Expectations matter too.** If people believe the central bank will bring inflation down, they ask for smaller wage increases and businesses plan smaller price hikes, which itself slows inflation.

**Example.** Imagine a town where everyone suddenly has extra cash and wants to renovate their kitchens. Builders are fully booked, so they raise prices, and lumber suppliers do the same. Now loans for renovations get more expensive: a $40,000 loan at 4% costs less each month than at 8%. Some families postpone. Builders find gaps in their schedules and stop raising prices.

**The trade-off:** higher rates slow the economy, which can mean fewer jobs and slower growth. Central banks try to raise rates enough to cool inflation without causing a recession, a balance that's often called a "soft landing". The effects also take time, often a year or more, which is why it's hard to get right.
'''),
],
[
("user", r'''
What does "opportunity cost" mean? I keep hearing it in podcasts.
'''),
("assistant", r'''
**Opportunity cost is the value of the best alternative you give up when you make a choice.** Every choice uses resources (money, time, attention) that could have gone somewhere else, and the opportunity cost is what that "somewhere else" would have given you.

Examples:

- **Time:** You spend Saturday afternoon binge-watching a show. The opportunity cost isn't zero just because it was free; it's whatever else you'd have done with those hours, say, a hike with friends or finishing a project.
- **Money:** You keep $10,000 in a checking account paying 0%. If a savings account would have paid 4%, your opportunity cost is about $400 a year.
- **Career:** Going back to school for two years costs tuition, but the bigger cost is often the salary you *don't* earn during those two years.
- **Business:** A bakery uses its oven for bread instead of cakes. If cakes would have earned more per hour of oven time, the bread has a hidden cost.

Two subtleties:

1. It's only the **best** alternative, not all of them added up. If you could have hiked, read or worked, the opportunity cost is whichever of those you valued most.
2. It's often not a money amount. It can be experiences, health, relationships.

The reason podcasters love the term: people tend to focus on the visible price of something and forget the invisible cost of what they didn't do.
'''),
],
[
("user", r'''
What's the "tragedy of the commons"? Give some modern examples.
'''),
("assistant", r'''
The **tragedy of the commons** describes what can happen when a resource is shared by everyone but owned by no one: each person acting in their own short-term interest overuses it, and the resource gets degraded or destroyed, even though everyone would be better off if it were preserved.

The classic illustration is a village pasture open to all herders. Each herder gains the full benefit of adding one more cow, but the cost (slightly less grass for everyone) is shared among all. So everyone adds cows, and the pasture gets overgrazed.

**Modern examples**

- **Overfishing.** Fish in international waters belong to nobody. Each fleet benefits from catching more; the collapse of a fishery is everyone's problem.
- **Traffic congestion.** Each driver adds a little delay for everyone else but doesn't pay for it.
- **Antibiotic resistance.** Each unnecessary prescription helps (or seems to help) one patient; the resulting resistance harms everyone.
- **Open-source maintenance.** Thousands of companies depend on libraries maintained by a handful of volunteers, and few contribute back.
- **Shared office kitchen.** Nobody cleans the microwave, because the cost of cleaning falls on one person and the benefit is shared.

**Ways out.** The economist Elinor Ostrom, who won the Nobel Prize in economics in 2009, studied communities that successfully manage shared resources for generations, such as irrigation systems and fisheries. Common ingredients: clear boundaries on who may use the resource, rules made by the users themselves, monitoring, and graduated penalties for rule-breakers. Other tools include quotas, pricing (e.g. congestion charges), and assigning ownership or usage rights.
'''),
],
[
("user", r'''
Explain Occam's razor, and when it can mislead you.
'''),
("assistant", r'''
**Occam's razor** is a rule of thumb: *when several explanations fit the evidence equally well, prefer the one that needs the fewest extra assumptions.* It's named after William of Ockham, a 14th-century English friar, though the idea is older.

**Examples**

- Your lawn is wet in the morning. It might have rained, or a neighbour might have secretly watered it, or a pipe burst and then fixed itself. "It rained" (and the street is wet too) needs the fewest extra assumptions.
- Your program crashes right after you changed one line. The change is the obvious suspect before blaming the compiler.
- A patient has a fever and a cough during flu season. Doctors learn the saying "when you hear hoofbeats, think horses, not zebras."

**Why it's useful.** Every extra assumption is another thing that could be wrong, so simpler explanations are, on average, more likely to be true. They're also easier to test.

**When it misleads**

- **It's a heuristic, not a law.** Reality is sometimes complicated. A patient can have two diseases at once; a bug can have two causes.
- **"Simple" is subjective.** "A ghost did it" sounds simple but actually hides enormous assumptions. Simplicity means fewer *unsupported* assumptions, not fewer words.
- **It only breaks ties.** It applies when explanations fit the evidence *equally well*. If a more complex theory explains more of the data, it wins. Einstein's relativity is more complicated than Newton's physics, but it explains observations Newton's can't.

A good way to use it: start with the simplest explanation, test it, and be ready to drop it when evidence doesn't fit.
'''),
],
[
("user", r'''
What is an API? I need to explain it to my (non-technical) manager in two minutes.
'''),
("assistant", r'''
Here's a two-minute version you can use nearly word for word:

> An **API** (application programming interface) is a **menu and an ordering process that one piece of software offers to another**.
>
> Think of a restaurant. You don't walk into the kitchen and cook; you look at the menu, place an order with the waiter, and get your dish. You don't need to know how the kitchen works.
>
> Software does the same thing. When our app shows a map, it doesn't contain the world's maps. It sends a request to a mapping company's API, "give me the map around this address", and gets the map back. When a customer pays, our site sends the payment details to the payment provider's API and gets back "approved" or "declined".
>
> APIs matter to us because:
> - **We don't have to build everything ourselves.** We can plug in payments, maps, email and so on.
> - **They're a contract.** As long as both sides stick to the agreed format, each side can change its internals freely.
> - **They can cost money and create dependencies.** Many APIs charge per request, and if a provider changes or shuts down its API, our features that rely on it break.

If your manager asks a follow-up, the most likely one is about cost or risk, so that last bullet is the one to be ready to expand on.
'''),
],
[
("user", r'''
How does a bill become a law in the US? Short version please.
'''),
("assistant", r'''
The simplified path for a federal bill:

1. **Introduction.** A member of Congress introduces the bill in the House or the Senate. (Bills that raise revenue must start in the House.)
2. **Committee.** It's sent to a committee, which can hold hearings, amend it ("markup"), and vote on whether to send it to the full chamber. Most bills die here.
3. **Floor vote.** The full chamber debates and votes. A simple majority passes it. In the Senate, most bills in practice need 60 votes to end debate (to overcome a filibuster) before the final vote.
4. **The other chamber.** The bill goes through the same process in the other chamber.
5. **Reconciling differences.** Both chambers must pass the *identical* text. If their versions differ, they negotiate (sometimes in a conference committee) and each votes again.
6. **The President.** The President can sign it into law, or **veto** it. If Congress isn't adjourned and the President does nothing for 10 days (excluding Sundays), it becomes law without a signature.
7. **Override.** Congress can override a veto with a two-thirds vote in both chambers.

After that, the law can still be challenged in court, and agencies often write detailed regulations to implement it.
'''),
],
[
("user", r'''
What actually caused World War I? School gave me the "archduke got shot" answer and that never satisfied me.
'''),
("assistant", r'''
You're right to be unsatisfied: the assassination was the **trigger**, not the cause. Historians usually talk about long-term conditions that made a big war likely, and a short crisis that set it off.

**Long-term conditions** (often remembered as "MAIN"):

- **Militarism.** The great powers had built up large armies and detailed mobilisation plans. Germany's Schlieffen Plan, for example, assumed a fast strike through Belgium against France before turning to Russia, which made a two-front war almost automatic once mobilisation started. The Anglo-German naval arms race also poisoned relations.
- **Alliances.** Europe was split into two blocs: Germany and Austria-Hungary (with Italy formally allied) on one side; France, Russia and, more loosely, Britain on the other. A local conflict could pull in everyone.
- **Imperialism.** Competition for colonies and influence, for instance crises over Morocco in 1905 and 1911, created repeated confrontations and mistrust.
- **Nationalism.** Pride and rivalry between nations, and within Austria-Hungary, nationalist movements among Slavic peoples, encouraged by Serbia, threatened to break up the empire.

**The July Crisis (1914)**

- **28 June:** Archduke Franz Ferdinand, heir to the Austro-Hungarian throne, was assassinated in Sarajevo by Gavrilo Princip, a Bosnian Serb connected to a Serbian nationalist network.
- Austria-Hungary, with Germany's backing (the so-called "blank cheque"), issued Serbia a harsh ultimatum and declared war on **28 July**.
- Russia mobilised to support Serbia; Germany declared war on Russia and then France; Germany invaded Belgium, and Britain declared war on Germany on **4 August**.

**Why it escalated so fast:** leaders believed a short war was winnable, mobilisation timetables left little room for diplomacy, and each power feared that backing down would be worse than fighting.

If you want to go deeper, historians still debate how much responsibility lies with Germany versus the system as a whole; Christopher Clark's *The Sleepwalkers* and Margaret MacMillan's *The War That Ended Peace* are two readable books on exactly that question.
'''),
],
[
("user", r'''
Why did the Roman Empire fall? Is there one main reason?
'''),
("assistant", r'''
There isn't one main reason, and historians have argued about it for centuries. It also helps to be precise about *which* empire: the **Western** Roman Empire ended in **476 CE**, when the last western emperor, Romulus Augustulus, was deposed by the Germanic general Odoacer. The **Eastern** Roman Empire (the Byzantine Empire) continued for almost another thousand years, until Constantinople fell to the Ottomans in **1453**.

Factors most historians point to for the West:

- **Political instability.** In the third century especially, emperors were frequently overthrown by their own armies. Civil wars drained resources that could have defended the borders.
- **Military pressure.** Migrating and invading peoples (Goths, Vandals, Huns and others) pushed on the frontiers. The sack of Rome by the Visigoths in 410 and by the Vandals in 455 were huge shocks.
- **Economic strain.** Heavy taxation, currency debasement, disrupted trade and the high cost of the army weakened the economy.
- **Division of the empire.** After the split into East and West, the richer, more defensible East survived, while the West had less money and more exposed borders.
- **Reliance on outside forces.** The West increasingly depended on Germanic troops and commanders whose loyalty was to their own leaders.

Older explanations, like Edward Gibbon's emphasis on moral decline or the rise of Christianity, are now seen as one-sided. Many modern historians also question the word "fall": for much of the population, life in the fifth and sixth centuries changed gradually rather than collapsing overnight, which is why some prefer to talk about a "transformation" of the Roman world.
'''),
],
[
("user", r'''
How does castling work in chess? I always forget the rules.
'''),
("assistant", r'''
Castling is the only move where you move two pieces at once: your **king** and one of your **rooks**.

**How to do it**

- **Kingside (short) castling:** the king moves two squares toward the h-file rook, and that rook jumps over to the square the king crossed. For White: king e1→g1, rook h1→f1. Written `O-O`.
- **Queenside (long) castling:** the king moves two squares toward the a-file rook, and the rook goes to the square the king crossed. For White: king e1→c1, rook a1→d1. Written `O-O-O`.

Black does the same on the 8th rank.

**Conditions: all must be true**

1. Neither the king nor that rook has moved before in the game.
2. All squares between the king and the rook are empty. (For queenside that includes the b-file square, even though the king doesn't cross it.)
3. The king is **not currently in check**.
4. The king does not **pass through** a square attacked by an enemy piece.
5. The king does not **land** on an attacked square (that's true of every move anyway).

Note that the *rook* may be attacked, or pass through an attacked square (the b1/b8 square in queenside castling); only the king's path matters.

**Why castle?** It tucks the king into a safer corner behind pawns and brings the rook toward the centre, where it's more useful. Most games see both players castle within the first ten or so moves.
'''),
],
]
